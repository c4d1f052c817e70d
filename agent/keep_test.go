package agent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/relayctl/relayctl/rollout/rollouttest"
	"github.com/relayctl/relayctl/uplink"
)

// The release store and keep, through a real session on the real file
// system: bytes sent once and kept, checked by their sha256, written
// through a temp file and a rename, never through a symlink nor in a
// folder others can write; packed forms decoded here, refused with their
// reason, and the session in step after each.

// testRoot is a folder of root's alone for a test's files, beside its
// state folder.
func testRoot(t *testing.T) (root, state string) {
	state = stateDir(t)
	return filepath.Dir(state), state
}

// keepReq is a keep request: PATH SHA256 SIZE MODE and the rest of args.
func keepReq(path string, data []byte, send bool, args ...string) string {
	var payload []byte
	if send {
		payload = data
	}
	return req("keep", 1, payload, nil, append([]string{path, sha256Hex(data), strconv.Itoa(len(data)), "0755"}, args...)...)
}

func syncReq() string { return req("sync", 0, nil, nil) }

// packedReq is a keep whose data is the form enc of data (the payload,
// or an offer without it when payload is nil).
func packedReq(path string, data []byte, enc, base, baseSHA string, payload []byte) string {
	return req("keep", 1, payload, nil, path, sha256Hex(data), strconv.Itoa(len(data)), "0755", "-", enc, base, baseSHA)
}

func encode(t *testing.T, enc string, data, base []byte) []byte {
	t.Helper()
	b, err := uplink.Encode(enc, data, base)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func want(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got answers\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// wantPrefix holds each answer to start with its want.
func wantPrefix(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d answers %q, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("answer %d: got %q, want it to start %q", i, got[i], want[i])
		}
	}
}

// onlyFile: dir holds the one file name, nothing left beside it.
func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != name {
		t.Errorf("%s holds %q, want %q alone", dir, names, name)
	}
}

func fileIs(t *testing.T, p string, data []byte) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(b, data) {
		t.Errorf("%s holds %d bytes (%v), want the %d kept", p, len(b), err, len(data))
	}
}

func TestKeepSendsOnceThenKeeps(t *testing.T) {
	root, state := testRoot(t)
	data := []byte("relayd bytes\n")
	file := filepath.Join(root, "releases", ".sha256", sha256Hex(data), "relayd")
	want(t, locked(t, state, keepReq(file, data, false)), "NEED")
	want(t, locked(t, state, keepReq(file, data, true)), "VAL sent 13")
	fileIs(t, file, data)
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode: %v %v, want 0755", fi, err)
	}
	onlyFile(t, filepath.Dir(file), "relayd")
	want(t, locked(t, state, keepReq(file, data, false)), "VAL kept")
	if j, _ := os.ReadFile(state + "/journal"); !strings.Contains(string(j), " ok keep "+file+"\n") {
		t.Errorf("the journal does not note the keep: %q", j)
	}
	// The same file changed on the host is not trusted: the bytes again.
	os.WriteFile(file, []byte("tampered\n"), 0o755)
	want(t, locked(t, state, keepReq(file, data, false)), "NEED")
	// Nor is a file another user owns, whatever it holds.
	os.WriteFile(file, data, 0o755)
	os.Chown(file, 65534, 0)
	want(t, locked(t, state, keepReq(file, data, false)), "NEED")
	want(t, locked(t, state, keepReq(file, data, true)), "VAL sent 13")
	if fi, _ := os.Stat(file); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("the kept file is not root's")
	}
}

// Bytes that are not what they claim (another sha256, another size) are
// not kept and leave nothing behind; the batch stops there and the
// session reads the next batch as requests.
func TestKeepRefusesOtherBytes(t *testing.T) {
	root, state := testRoot(t)
	data := []byte("relayd bytes\n")
	file := filepath.Join(root, "store", "relayd")
	claimed := []byte("other bytes!\n")
	bad := req("keep", 1, data, nil, file, sha256Hex(claimed), "13", "0755")
	short := req("keep", 1, data[:5], nil, file, sha256Hex(data), "13", "0755")
	long := req("keep", 1, bytes.Repeat(data, 1000), nil, file, sha256Hex(data), "13", "0755")
	want(t, locked(t, state, bad, keepReq(file, data, true), syncReq(), short, syncReq(), long, syncReq(), keepReq(file, data, true)),
		"ERR the bytes received for "+file+" have sha256 "+sha256Hex(data)+", want "+sha256Hex(claimed), "SKIP", "OK",
		"ERR received 5 of 13 bytes for "+file, "OK",
		"ERR received 13000 of 13 bytes for "+file, "OK",
		"VAL sent 13")
	onlyFile(t, filepath.Dir(file), "relayd")
	for _, c := range []struct{ name, size, mode, want string }{
		{"a size that is no number", "13x", "0755", "ERR keep " + file + ": bad size \"13x\""},
		{"a set-id mode", "13", "4755", "ERR keep " + file + ": bad mode \"4755\""},
		{"a mode that is no octal", "13", "0758", "ERR keep " + file + ": bad mode \"0758\""},
	} {
		got := locked(t, state, req("keep", 1, data, nil, file, sha256Hex(data), c.size, c.mode), syncReq(), req("clock", 0, nil, nil))
		if len(got) != 3 || !strings.HasPrefix(got[0], c.want) || !strings.HasPrefix(got[2], "VAL ") {
			t.Errorf("%s: got %q, want %q then the clock", c.name, got, c.want)
		}
	}
}

// Root writes no file through a symlink at PATH or in a folder above it,
// nor in a folder another user owns or can write; what a symlink points
// at stays as it was.
func TestKeepNeverWritesThroughSymlinksOrOpenFolders(t *testing.T) {
	root, state := testRoot(t)
	data := []byte("A=1\n")
	victim := filepath.Join(root, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	etc := filepath.Join(root, "etc")
	os.Mkdir(etc, 0o755)
	link := filepath.Join(etc, "relayd.env.relayctl-new")
	os.Symlink(victim, link)

	open := filepath.Join(root, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	// A folder above the file, a symlink of root's to a folder anyone can
	// write.
	os.Symlink(open, filepath.Join(root, "via-root-link"))
	// A symlink another user owns, to a folder of root's.
	os.Symlink(etc, filepath.Join(root, "via-users-link"))
	os.Lchown(filepath.Join(root, "via-users-link"), 65534, 65534)
	users := filepath.Join(root, "users")
	os.Mkdir(users, 0o755)
	os.Chown(users, 65534, 0)

	for _, c := range []struct{ name, path, want string }{
		{"a symlink at the path", link, link + " is a symlink; relayctl writes no file through or over a symlink"},
		{"a folder anyone can write", filepath.Join(open, "relayd"), open + " is not owned by root or is writable by its group or others"},
		{"a symlink above to a folder anyone can write", filepath.Join(root, "via-root-link", "relayd"), open + " (through a symlink in " + filepath.Join(root, "via-root-link") + ") is not owned by root"},
		{"a symlink above of another user's", filepath.Join(root, "via-users-link", "relayd"), filepath.Join(root, "via-users-link") + " is not owned by root"},
		{"a folder of another user's", filepath.Join(users, "relayd"), users + " is not owned by root"},
	} {
		for _, send := range []bool{false, true} {
			got := locked(t, state, keepReq(c.path, data, send, c.path+".like"), syncReq(), req("clock", 0, nil, nil))
			if len(got) != 3 || !strings.HasPrefix(got[0], "ERR "+c.want) || !strings.HasPrefix(got[2], "VAL ") {
				t.Errorf("%s (data sent %v): got %q, want ERR %s, then the clock", c.name, send, got, c.want)
			}
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("wrote through a symlink: the victim holds %q", b)
	}
	for _, d := range []string{open, users} {
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("wrote in %s: %v", d, entries)
		}
	}
}

// A file relayctl replaces keeps its mode and owner (LIKE): a 0640 config
// of group nogroup stays so, whether its bytes are sent or kept.
func TestKeepTakesTheModeAndOwnerOfLike(t *testing.T) {
	root, state := testRoot(t)
	like := filepath.Join(root, "relayd.env")
	os.WriteFile(like, []byte("SECRET=1\n"), 0o640)
	os.Chmod(like, 0o640)
	os.Chown(like, 0, 65534)
	next := []byte("SECRET=2\n")
	p := like + ".relayctl-new"
	modeOf := func() (os.FileMode, uint32) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid
	}
	want(t, locked(t, state, keepReq(p, next, true, like)), "VAL sent 9")
	if m, g := modeOf(); m != 0o640 || g != 65534 {
		t.Errorf("sent: mode %o gid %d, want 640 65534", m, g)
	}
	os.Chmod(p, 0o644)
	os.Chown(p, 0, 0)
	want(t, locked(t, state, keepReq(p, next, false, like)), "VAL kept")
	if m, g := modeOf(); m != 0o640 || g != 65534 {
		t.Errorf("kept: mode %o gid %d, want 640 65534", m, g)
	}
	// A LIKE that is a symlink lends nothing: the file gets MODE.
	os.Remove(p)
	linkLike := filepath.Join(root, "like-link")
	os.Symlink(like, linkLike)
	want(t, locked(t, state, keepReq(p, next, true, linkLike)), "VAL sent 9")
	if m, g := modeOf(); m != 0o755 || g != 0 {
		t.Errorf("like a symlink: mode %o gid %d, want 755 0", m, g)
	}
}

// storeWith is a release store holding old, as an earlier apply left it.
func storeWith(t *testing.T, root string, old []byte) (base string) {
	t.Helper()
	base = filepath.Join(root, "releases", ".sha256", sha256Hex(old), "relayd")
	os.MkdirAll(filepath.Dir(base), 0o755)
	if err := os.WriteFile(base, old, 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}

func twoReleases(t *testing.T) (old, new []byte) {
	t.Helper()
	old, new, err := rollouttest.TwoReleases(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return old, new
}

// Every form relayctl makes is decoded here: offered (NEED: send it),
// then sent, checked by its sha256, renamed into place.
func TestKeepDecodesEveryForm(t *testing.T) {
	root, state := testRoot(t)
	old, new := twoReleases(t)
	base := storeWith(t, root, old)
	for _, enc := range uplink.Encodings {
		file := filepath.Join(root, enc, "relayd")
		b, sha := "-", "-"
		if enc == uplink.ZstdPatch {
			b, sha = base, sha256Hex(old)
		}
		form := encode(t, enc, new, old)
		want(t, locked(t, state, packedReq(file, new, enc, b, sha, nil)), "NEED")
		want(t, locked(t, state, packedReq(file, new, enc, b, sha, form), req("clock", 0, nil, nil))[:1], "VAL decoded "+strconv.Itoa(len(new)))
		fileIs(t, file, new)
		onlyFile(t, filepath.Dir(file), "relayd")
		want(t, locked(t, state, packedReq(file, new, enc, b, sha, nil)), "VAL kept")
	}
}

// A patch's base that is not the release it was made from, not a regular
// file of root's alone, or in a folder others can write, refuses the form
// before its bytes are sent, and after them (NEED and why: the next form
// follows).
func TestKeepRefusesAPatchFromAnotherBase(t *testing.T) {
	root, state := testRoot(t)
	old, new := twoReleases(t)
	base := storeWith(t, root, old)
	patch := encode(t, uplink.ZstdPatch, new, old)
	file := filepath.Join(root, "releases", ".sha256", sha256Hex(new), "relayd")
	changed := append(bytes.Clone(old), 'x')
	open := filepath.Join(root, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	for _, c := range []struct {
		name  string
		plant func() string // the base it leaves
		why   string
	}{
		{"other bytes under its name", func() string { os.WriteFile(base, changed, 0o755); return base },
			"the patch's base " + base + " has sha256 " + sha256Hex(changed) + ", not the " + sha256Hex(old) + " it was made from"},
		{"no base", func() string { return base + ".missing" }, "the patch's base " + base + ".missing is not a regular file of root's alone"},
		{"a symlink to the base", func() string { os.WriteFile(base, old, 0o755); os.Symlink(base, base+".link"); return base + ".link" },
			"the patch's base " + base + ".link is not a regular file of root's alone"},
		{"a base of another user's", func() string {
			os.WriteFile(base+".users", old, 0o755)
			os.Chown(base+".users", 65534, 0)
			return base + ".users"
		},
			"the patch's base " + base + ".users is not a regular file of root's alone"},
		{"a base in a folder anyone can write", func() string { os.WriteFile(open+"/relayd", old, 0o755); return open + "/relayd" },
			open + " is not owned by root or is writable by its group or others"},
	} {
		b := c.plant()
		want(t, locked(t, state, packedReq(file, new, uplink.ZstdPatch, b, sha256Hex(old), nil)), "NEED "+c.why)
		want(t, locked(t, state, packedReq(file, new, uplink.ZstdPatch, b, sha256Hex(old), patch), syncReq(), req("clock", 0, nil, nil))[:2],
			"NEED the zstd-patch form: "+c.why, "OK")
		if _, err := os.Stat(file); err == nil {
			t.Errorf("%s: the file was written", c.name)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// Forms that are not the release after their bytes: bytes that are no
// gzip at all, a damaged patch, a patch made from other bytes, gzip of
// more bytes, gzip of other bytes of the same size, an encoding the agent
// does not know. Each is NEED and why (the next form follows in the next
// batch), nothing is left behind, every byte of it is read (the request
// after it is read as a request), and the release as it is is kept last.
func TestKeepFallsBackFromFormsThatDoNotDecode(t *testing.T) {
	root, state := testRoot(t)
	old, new := twoReleases(t)
	base := storeWith(t, root, old)
	file := filepath.Join(root, "releases", ".sha256", sha256Hex(new), "relayd")
	damaged := encode(t, uplink.ZstdPatch, new, old)
	damaged[len(damaged)/2] ^= 0xff
	otherSame := bytes.Clone(new)
	otherSame[10] ^= 1
	forms := []struct {
		enc, base, baseSHA string
		data               []byte
		why                string
	}{
		{uplink.Gzip, "-", "-", bytes.Repeat([]byte("not gzip\n"), 100000), "the gzip form: gzip -d: gzip: invalid header"},
		{uplink.ZstdPatch, base, sha256Hex(old), damaged, "the zstd-patch form: zstd -d: "},
		{uplink.ZstdPatch, base, sha256Hex(old), encode(t, uplink.ZstdPatch, new, new[:len(new)/2]), "the zstd-patch form: "},
		{uplink.Gzip, "-", "-", encode(t, uplink.Gzip, append(bytes.Clone(new), "and more"...), nil), "the gzip form: it decoded to more than " + strconv.Itoa(len(new)) + " bytes"},
		{uplink.Gzip, "-", "-", encode(t, uplink.Gzip, otherSame, nil), "the gzip form decoded to bytes with sha256 " + sha256Hex(otherSame) + ", want " + sha256Hex(new)},
		{"bzip2", "-", "-", []byte("BZh9 whatever"), "the bzip2 form: bzip2 is not a form the agent decodes"},
	}
	conf := []byte("RELAYD_LISTEN=0.0.0.0:7788\n")
	confFile := filepath.Join(root, "relayd.env")
	for _, f := range forms {
		got := locked(t, state, packedReq(file, new, f.enc, f.base, f.baseSHA, f.data), keepReq(confFile, conf, true), syncReq(), req("clock", 0, nil, nil))
		wantPrefix(t, got, "NEED "+f.why, "SKIP", "OK", "VAL ")
		if _, err := os.Stat(file); err == nil {
			t.Fatalf("%s: a form that is not the release was kept", f.why)
		}
	}
	want(t, locked(t, state, keepReq(file, new, true), keepReq(confFile, conf, true)), "VAL sent "+strconv.Itoa(len(new)), "VAL sent "+strconv.Itoa(len(conf)))
	fileIs(t, file, new)
	fileIs(t, confFile, conf)
	onlyFile(t, filepath.Dir(file), "relayd")
}

// A decompression bomb is decoded no further than the file's size and a
// byte: 64 MiB of zeros in gzip, and in zstd both as one frame that says
// its size (refused at its header) and as a stream that does not (cut at
// the size); the session stays in step.
func TestKeepBoundsADecompressionBomb(t *testing.T) {
	root, state := testRoot(t)
	zeros := make([]byte, 64<<20)
	small := []byte(strings.Repeat("relayd ", 200))
	file := filepath.Join(root, "store", "relayd")
	for _, c := range []struct {
		enc  string
		bomb []byte
		why  string
	}{
		{uplink.Gzip, encode(t, uplink.Gzip, zeros, nil), "the gzip form: it decoded to more than 1400 bytes, want 1400"},
		{uplink.Zstd, encode(t, uplink.Zstd, zeros, nil), "the zstd form: zstd -d: "},
		{uplink.Zstd, zstdStream(t, zeros), "the zstd form: it decoded to more than 1400 bytes, want 1400"},
	} {
		got := locked(t, state, packedReq(file, small, c.enc, "-", "-", c.bomb), req("clock", 0, nil, nil), syncReq(), keepReq(file, small, true))
		wantPrefix(t, got, "NEED "+c.why, "SKIP", "OK", "VAL sent 1400")
		os.Remove(file)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// A write that fails on a full disk keeps the host's own words, leaves no
// temp file, and every byte that could not be written is still read: the
// next request is read as a request, not as the rest of the file.
func TestKeepOnAFullDisk(t *testing.T) {
	root, state := testRoot(t)
	full := filepath.Join(root, "small")
	os.Mkdir(full, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "relayctl-agent-test", full).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", full).Run() })
	data := []byte(strings.Repeat("relayd bytes\n", 40000)) // 520,000 bytes: more than fits
	file := filepath.Join(full, "relayd")
	got := locked(t, state, keepReq(file, data, true), syncReq(), packedReq(file, data, uplink.Gzip, "-", "-", encode(t, uplink.Gzip, data, nil)), syncReq(), req("clock", 0, nil, nil))
	wantPrefix(t, got, "ERR write "+file+": No space left on device", "OK", "ERR write "+file+": No space left on device", "OK", "VAL ")
	if entries, _ := os.ReadDir(full); len(entries) != 0 {
		t.Errorf("left on the full disk: %v", entries)
	}
}

// decodeInto writes no more than the size and a byte of a form that
// unpacks to much more (a zstd frame that does not say its size: one that
// does is refused at its header).
func TestDecodeIntoStopsAtTheSizeAndAByte(t *testing.T) {
	root, _ := testRoot(t)
	os.MkdirAll(root, 0o755)
	zeros := make([]byte, 16<<20)
	for enc, form := range map[string][]byte{uplink.Gzip: encode(t, uplink.Gzip, zeros, nil), uplink.Zstd: zstdStream(t, zeros)} {
		tmp := filepath.Join(root, "decoded-"+enc)
		os.WriteFile(tmp, nil, 0o600)
		n, sum, err := decodeInto(tmp, enc, bytes.NewReader(form), nil, 1<<20)
		fi, serr := os.Stat(tmp)
		if serr != nil || n != 1<<20+1 || fi.Size() != 1<<20+1 {
			t.Errorf("%s: decoded %d bytes (%v), the file holds %v; want %d", enc, n, err, fi, 1<<20+1)
		}
		// The sum settle trusts is of the bytes in the file.
		if b, _ := os.ReadFile(tmp); sum != sha256Hex(b) {
			t.Errorf("%s: decodeInto says sha256 %s, the file holds %s", enc, sum, sha256Hex(b))
		}
	}
}

// zstdStream is data as one zstd frame that does not say its size, with
// a window of 1 MiB.
func zstdStream(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := zstd.NewWriter(&b, zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/relayctl/relayctl/artifact"
	"github.com/relayctl/relayctl/relay/capability"
)

// Release folders made from the store, checked and described on the real
// file system: a binary copied, a tarball unpacked here by the rules
// relayctl read it by, checked by its tree hash and root's alone before
// it is renamed into place; old releases pruned, never the current one.

// member is one tarball member as a test writes it.
type member struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	size       int64 // the header's size, when it is not the body's
}

func makeTar(t testing.TB, gz bool, ms ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	var z *gzip.Writer
	w := tar.NewWriter(&buf)
	if gz {
		z = gzip.NewWriter(&buf)
		w = tar.NewWriter(z)
	}
	for _, m := range ms {
		typ := m.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: typ, Mode: m.mode, Size: int64(len(m.body)), Uid: 1000, Gid: 1000}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if m.size != 0 {
			h.Size = m.size
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if m.size != 0 {
			w.Flush()
			return buf.Bytes() // a header whose body never comes
		}
		if typ == tar.TypeReg {
			w.Write([]byte(m.body))
		}
	}
	w.Close()
	if z != nil {
		z.Close()
	}
	return buf.Bytes()
}

var goodMembers = []member{
	{name: "bin/", typ: tar.TypeDir, mode: 0o755},
	{name: "bin/myrelay", mode: 0o755, body: "#!/bin/sh\necho relay\n"},
	{name: "share/notes.txt", mode: 0o644, body: "hello\n"},
	{name: "share/", typ: tar.TypeDir, mode: 0o750},
}

// inStore writes data in the release store under root, as keep leaves it.
func inStore(t *testing.T, root string, data []byte, name string) string {
	t.Helper()
	p := filepath.Join(root, "releases", ".sha256", sha256Hex(data), name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func placeReq(dir, file, sum, program, tree string) string {
	return req("place-release", 1, nil, nil, dir, file, sum, program, tree)
}

func checkReq(dir, sum, program, tree string) string {
	return req("check-release", 0, nil, nil, dir, sum, program, tree)
}

func TestPlaceReleaseOfABinary(t *testing.T) {
	root, state := testRoot(t)
	data := []byte("#!/bin/sh\necho relayd 1.8.0\n")
	file := inStore(t, root, data, "relayd")
	dir := filepath.Join(root, "releases", "1.8.0")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "stale"), []byte("an earlier try's\n"), 0o644)
	want(t, locked(t, state, placeReq(dir, file, sha256Hex(data), "relayd", "-"), checkReq(dir, sha256Hex(data), "relayd", "-")), "OK", "OK")
	fileIs(t, filepath.Join(dir, "relayd"), data)
	onlyFile(t, dir, "relayd")
	if fi, _ := os.Stat(filepath.Join(dir, "relayd")); fi.Mode().Perm() != 0o755 {
		t.Errorf("the program's mode: %o, want 755", fi.Mode().Perm())
	}
	if j, _ := os.ReadFile(state + "/journal"); !strings.Contains(string(j), " ok place-release "+dir+"\n") {
		t.Errorf("the journal does not note it: %q", j)
	}

	other := filepath.Join(root, "releases", "1.9.0")
	link := filepath.Join(root, "store-link")
	os.Symlink(file, link)
	open := filepath.Join(root, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	wrong := strings.Repeat("0", 64)
	for _, c := range []struct{ name, req, want string }{
		{"another sha256", placeReq(other, file, wrong, "relayd", "-"), "ERR the release on the host has sha256 " + sha256Hex(data) + ", want " + wrong},
		{"a symlink for the file", placeReq(other, link, sha256Hex(data), "relayd", "-"), "ERR " + link + " is not a regular file"},
		{"no file", placeReq(other, file+".none", sha256Hex(data), "relayd", "-"), "ERR " + file + ".none is not a regular file"},
		{"a program out of the folder", placeReq(other, file, sha256Hex(data), "../relayd", "-"), "ERR place " + other + ": bad program \"../relayd\""},
		{"a binary's program in a subfolder", placeReq(other, file, sha256Hex(data), "bin/relayd", "-"), "ERR place " + other + ": bad program \"bin/relayd\""},
		{"a folder anyone can write", placeReq(filepath.Join(open, "1.9.0"), file, sha256Hex(data), "relayd", "-"), "ERR " + open + " is not owned by root or is writable by its group or others"},
	} {
		got := locked(t, state, c.req, syncReq(), req("clock", 0, nil, nil))
		if len(got) != 3 || !strings.HasPrefix(got[0], c.want) || !strings.HasPrefix(got[2], "VAL ") {
			t.Errorf("%s: got %q, want %q, then the clock", c.name, got, c.want)
		}
	}
	for _, p := range []string{other, other + ".relayctl-new", filepath.Join(open, "1.9.0")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made", p)
		}
	}
}

// A tarball is unpacked into a folder of its own, root's, and checked
// there by the tree hash relayctl made from the tarball it reviewed: a
// file changed since is refused, as is a file the tarball did not have.
func TestPlaceAndCheckATarball(t *testing.T) {
	root, state := testRoot(t)
	for _, gz := range []bool{true, false} {
		r, err := artifact.Tarball(makeTar(t, gz, goodMembers...), "bin/myrelay")
		if err != nil {
			t.Fatal(err)
		}
		file := inStore(t, root, r.Data, "release.tar")
		dir := filepath.Join(root, "releases", "2.0.0")
		want(t, locked(t, state, placeReq(dir, file, r.SHA256, "bin/myrelay", r.TreeSHA256), checkReq(dir, r.SHA256, "bin/myrelay", r.TreeSHA256)), "OK", "OK")
		for p, mode := range map[string]os.FileMode{"bin": 0o755 | os.ModeDir, "bin/myrelay": 0o755, "share": 0o750 | os.ModeDir, "share/notes.txt": 0o644} {
			fi, err := os.Lstat(filepath.Join(dir, p))
			if err != nil || fi.Mode() != mode || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Sys().(*syscall.Stat_t).Gid != 0 {
				t.Errorf("%s: %v %v, want mode %v, root's", p, fi, err, mode)
			}
		}
		check := func() []string { return locked(t, state, checkReq(dir, r.SHA256, "bin/myrelay", r.TreeSHA256)) }
		os.WriteFile(filepath.Join(dir, "share", "notes.txt"), []byte("changed\n"), 0o644)
		wantPrefix(t, check(), "ERR the release already in "+dir+" is not the one reviewed: the files in "+dir+" hash to ")
		os.WriteFile(filepath.Join(dir, "share", "notes.txt"), []byte("hello\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "extra"), []byte("x"), 0o644)
		if got := check(); !strings.HasSuffix(got[0], "want "+r.TreeSHA256+": not the release reviewed") {
			t.Errorf("an extra file: got %q", got)
		}
		os.Remove(filepath.Join(dir, "extra"))
		want(t, check(), "OK")
		// Files that hash to another tree: nothing placed, nothing left.
		bad := filepath.Join(root, "releases", "2.0.1")
		wantPrefix(t, locked(t, state, placeReq(bad, file, r.SHA256, "bin/myrelay", strings.Repeat("0", 64))),
			"ERR the files in "+bad+".relayctl-new hash to "+r.TreeSHA256+" (find | sort | sha256sum), want "+strings.Repeat("0", 64)+": not the release reviewed")
		for _, p := range []string{bad, bad + ".relayctl-new"} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s left behind", p)
			}
		}
		// A tarball in the store that is not the one reviewed is not
		// unpacked, even where its files would hash to the tree asked.
		wantPrefix(t, locked(t, state, placeReq(bad, file, strings.Repeat("0", 64), "bin/myrelay", r.TreeSHA256)),
			"ERR the release on the host has sha256 "+r.SHA256+", want "+strings.Repeat("0", 64))
		for _, p := range []string{bad, bad + ".relayctl-new"} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s left behind by a tarball of another sha256", p)
			}
		}
		os.RemoveAll(dir)
	}
}

// A tarball that breaks the rules is refused before anything is renamed
// into place: what a link, a device, a name out of the release, a set-id
// or writable file, a member twice, or a bomb would have made is not
// made, the release already in place stays, and nothing is written
// outside the folder being unpacked.
func TestPlaceReleaseRefusesHostileTarballs(t *testing.T) {
	root, state := testRoot(t)
	prog := member{name: "bin/myrelay", mode: 0o755, body: "#!/bin/sh\n"}
	dir := filepath.Join(root, "releases", "3.0.0")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "myrelay"), []byte("the release in place\n"), 0o755)
	notGzip := append([]byte{0x1f, 0x8b}, bytes.Repeat([]byte("x"), 100)...)
	whole := makeTar(t, false, prog, member{name: "share/big", mode: 0o644, body: strings.Repeat("b", 4096)})
	for _, c := range []struct {
		name    string
		tarball []byte
		want    string
	}{
		{"a symlink", makeTar(t, true, prog, member{name: "bin/lib", typ: tar.TypeSymlink, link: "/etc"}), `tarball member "bin/lib" is a link (to "/etc")`},
		{"a hard link", makeTar(t, true, prog, member{name: "bin/shadow", typ: tar.TypeLink, link: "/etc/shadow"}), `tarball member "bin/shadow" is a link (to "/etc/shadow")`},
		{"a name out of the release", makeTar(t, true, prog, member{name: "../evil", mode: 0o644, body: "x"}), `tarball member "../evil": want a path inside the release`},
		{"a name through ..", makeTar(t, true, prog, member{name: "bin/../../evil", mode: 0o644, body: "x"}), `tarball member "bin/../../evil": want a path inside the release`},
		{"an absolute name", makeTar(t, true, prog, member{name: "/evil", mode: 0o644, body: "x"}), `tarball member "/evil": want a path inside the release`},
		{"a device", makeTar(t, true, prog, member{name: "bin/mem", typ: tar.TypeChar, mode: 0o644}), `tarball member "bin/mem" is of type "3"`},
		{"a fifo", makeTar(t, true, prog, member{name: "bin/fifo", typ: tar.TypeFifo, mode: 0o644}), `tarball member "bin/fifo" is of type "6"`},
		{"a setuid file", makeTar(t, true, member{name: "bin/myrelay", mode: 0o4755, body: "#!/bin/sh\n"}), `tarball member "bin/myrelay" has a set-id or sticky bit (mode 4755)`},
		{"a group-writable file", makeTar(t, true, prog, member{name: "bin/conf", mode: 0o664, body: "x"}), `tarball member "bin/conf" is writable by its group or others (mode 0664)`},
		{"a member twice", makeTar(t, true, prog, member{name: "bin/myrelay", mode: 0o755, body: "#!/bin/sh\nevil\n"}), "tarball member bin/myrelay appears twice"},
		{"a folder, then a file of its name", makeTar(t, true, prog, member{name: "share/", typ: tar.TypeDir, mode: 0o755}, member{name: "share", mode: 0o644, body: "x"}), "tarball member share appears twice"},
		{"a file where a folder is made", makeTar(t, true, member{name: "bin", mode: 0o755, body: "x"}, prog), "unpack " + dir + ".relayctl-new/bin: Not a directory"},
		{"more than the limit, said", makeTar(t, false, prog, member{name: "share/huge", mode: 0o644, size: artifact.MaxUnpackedBytes}), "the tarball unpacks to more than 2147483648 bytes"},
		{"cut short", whole[:len(whole)-1024-2000], "unpack " + dir + ".relayctl-new/share/big: unexpected EOF"},
		{"gzip that is not", notGzip, "read the gzipped tarball: "},
		{"a program not executable", makeTar(t, true, member{name: "bin/myrelay", mode: 0o644, body: "#!/bin/sh\n"}), dir + ".relayctl-new/bin/myrelay is not executable"},
		{"no program", makeTar(t, true, member{name: "bin/other", mode: 0o755, body: "#!/bin/sh\n"}), dir + ".relayctl-new/bin/myrelay is not a regular file"},
	} {
		file := inStore(t, root, c.tarball, "release.tar")
		got := locked(t, state, placeReq(dir, file, sha256Hex(c.tarball), "bin/myrelay", strings.Repeat("0", 64)), syncReq(), req("clock", 0, nil, nil))
		if len(got) != 3 || !strings.HasPrefix(got[0], "ERR "+c.want) || !strings.HasPrefix(got[2], "VAL ") {
			t.Errorf("%s: got %q, want ERR %s, then the clock", c.name, got, c.want)
		}
		fileIs(t, filepath.Join(dir, "myrelay"), []byte("the release in place\n"))
		for _, p := range []string{dir + ".relayctl-new", filepath.Join(root, "releases", "evil"), filepath.Join(root, "evil"), "/evil"} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s: %s was made", c.name, p)
			}
		}
	}
}

// A release is trusted only when root alone can change it, all the way
// down, even when its program has the planned sha256.
func TestCheckReleaseOwnership(t *testing.T) {
	root, state := testRoot(t)
	rel := filepath.Join(root, "releases", "1.8.0")
	os.MkdirAll(rel, 0o755)
	body := []byte("#!/bin/sh\n")
	os.WriteFile(filepath.Join(rel, "relayd"), body, 0o755)
	sha := sha256Hex(body)
	check := func() []string { return locked(t, state, checkReq(rel, sha, "relayd", "-")) }
	want(t, check(), "OK")
	nobody := 65534
	for _, c := range []struct {
		name        string
		plant, undo func()
		want        string
	}{
		{"a folder of another user's", func() { os.Chown(rel, nobody, 0) }, func() { os.Chown(rel, 0, 0) }, rel + " is not owned by root"},
		{"a binary of another user's", func() { os.Chown(filepath.Join(rel, "relayd"), nobody, 0) }, func() { os.Chown(filepath.Join(rel, "relayd"), 0, 0) },
			filepath.Join(rel, "relayd") + " is not owned by root"},
		{"a group-writable file", func() {
			os.WriteFile(filepath.Join(rel, "lib.so"), body, 0o664)
			os.Chmod(filepath.Join(rel, "lib.so"), 0o664)
		},
			func() { os.Remove(filepath.Join(rel, "lib.so")) }, filepath.Join(rel, "lib.so") + " is not owned by root or is writable"},
		{"a symlink inside", func() { os.Symlink("/tmp", filepath.Join(rel, "lib")) }, func() { os.Remove(filepath.Join(rel, "lib")) },
			filepath.Join(rel, "lib") + " is a symlink"},
		{"a parent of another user's", func() { os.Chown(filepath.Dir(rel), nobody, 0) }, func() { os.Chown(filepath.Dir(rel), 0, 0) },
			filepath.Dir(rel) + " is not owned by root"},
		{"other bytes", func() { os.WriteFile(filepath.Join(rel, "relayd"), []byte("#!/bin/sh\nevil\n"), 0o755) }, func() { os.WriteFile(filepath.Join(rel, "relayd"), body, 0o755) },
			"the release already in " + rel + " is not the one reviewed: " + filepath.Join(rel, "relayd") + " has sha256 " + sha256Hex([]byte("#!/bin/sh\nevil\n")) + ", want " + sha},
		{"no program", func() { os.Rename(filepath.Join(rel, "relayd"), filepath.Join(rel, "x")) }, func() { os.Rename(filepath.Join(rel, "x"), filepath.Join(rel, "relayd")) },
			"the release already in " + rel + " is not the one reviewed: " + filepath.Join(rel, "relayd") + " is not a regular file"},
	} {
		c.plant()
		if got := check(); !strings.HasPrefix(got[0], "ERR "+c.want) {
			t.Errorf("%s: got %q, want ERR %s", c.name, got, c.want)
		}
		c.undo()
	}
	want(t, check(), "OK")
}

// release-sum describes a release for the receipt: its program's sha256,
// its tree hash (asked for), the capabilities its marker lists; nothing,
// and no failure, where there is no release to describe.
func TestReleaseSum(t *testing.T) {
	root, state := testRoot(t)
	dir := filepath.Join(root, "1.7.0")
	os.MkdirAll(dir, 0o755)
	body := "\x7fELF...." + capability.Marker + "...." + capability.Prefix + "later=one/1\n"
	os.WriteFile(filepath.Join(dir, "relayd"), []byte(body), 0o755)
	caps := strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(capability.Marker), capability.Prefix), " ", ",")
	tree := artifact.TreeHash(map[string]string{"relayd": sha256Hex([]byte(body))})
	plain := filepath.Join(root, "plain")
	os.MkdirAll(plain, 0o755)
	os.WriteFile(filepath.Join(plain, "relayd"), []byte("no marker"), 0o755)
	linked := filepath.Join(root, "linked")
	os.MkdirAll(linked, 0o755)
	os.Symlink(filepath.Join(dir, "relayd"), filepath.Join(linked, "relayd"))
	os.Symlink(dir, filepath.Join(root, "dir-link"))
	sum := func(dir, tree string) string { return req("release-sum", 0, nil, nil, dir, "relayd", tree) }
	want(t, locked(t, state, sum(dir, "-"), sum(dir, "tree"), sum(plain, "-"), sum(filepath.Join(root, "none"), "-"), sum(linked, "-"), sum(filepath.Join(root, "dir-link"), "-")),
		"VAL "+sha256Hex([]byte(body))+" - "+caps,
		"VAL "+sha256Hex([]byte(body))+" "+tree+" "+caps,
		"VAL "+sha256Hex([]byte("no marker"))+" - ",
		"VAL ", "VAL ", "VAL ")
}

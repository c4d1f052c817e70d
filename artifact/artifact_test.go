package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type member struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func makeTar(t testing.TB, gz bool, ms ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	var out io.Writer = &buf
	var z *gzip.Writer
	if gz {
		z = gzip.NewWriter(&buf)
		out = z
	}
	w := tar.NewWriter(out)
	for _, m := range ms {
		typ := m.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: typ, Mode: m.mode, Size: int64(len(m.body))}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
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
	{name: "share/readme.txt", mode: 0o644, body: "hello\n"},
}

func TestTarballReadsAGoodRelease(t *testing.T) {
	for _, gz := range []bool{false, true} {
		r, err := Tarball(makeTar(t, gz, goodMembers...), "bin/myrelay")
		if err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		if r.Files != 2 || string(r.Program) != "#!/bin/sh\necho relay\n" || len(r.TreeSHA256) != 64 {
			t.Errorf("gzip %v: got %d files, program %q, tree %q", gz, r.Files, r.Program, r.TreeSHA256)
		}
	}
}

// Every way a tarball could lead root out of the release folder, or leave
// something in it another user could change, is refused before any host
// unpacks it.
func TestTarballRefusesHostileMembers(t *testing.T) {
	prog := member{name: "bin/myrelay", mode: 0o755, body: "x"}
	tests := []struct {
		name string
		m    member
		want string
	}{
		{"symlink", member{name: "etc", typ: tar.TypeSymlink, link: "/etc"}, "is a link"},
		{"hard link", member{name: "shadow", typ: tar.TypeLink, link: "/etc/shadow"}, "is a link"},
		{"dot dot", member{name: "../../etc/cron.d/x", mode: 0o644, body: "x"}, "no .."},
		{"dot dot inside", member{name: "a/../../x", mode: 0o644, body: "x"}, "no .."},
		{"absolute", member{name: "/etc/passwd", mode: 0o644, body: "x"}, "no leading /"},
		{"device", member{name: "dev", typ: tar.TypeChar}, "of type"},
		{"fifo", member{name: "fifo", typ: tar.TypeFifo}, "of type"},
		{"setuid", member{name: "bin/su", mode: 0o4755, body: "x"}, "set-id"},
		{"group writable", member{name: "bin/x", mode: 0o775, body: "x"}, "writable by its group or others"},
		{"odd name", member{name: "bin/a b", mode: 0o644, body: "x"}, "want a path inside the release"},
		{"newline", member{name: "bin/a\nb", mode: 0o644, body: "x"}, "want a path inside the release"},
		{"twice", member{name: "bin/myrelay", mode: 0o755, body: "y"}, "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Tarball(makeTar(t, false, prog, tt.m), "bin/myrelay")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := Tarball(makeTar(t, false, goodMembers...), "bin/other"); err == nil || !strings.Contains(err.Error(), "holds no file bin/other") {
		t.Errorf("missing program: got %v", err)
	}
	if _, err := Tarball(makeTar(t, false, member{name: "bin/myrelay", mode: 0o644, body: "x"}), "bin/myrelay"); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("program not executable: got %v", err)
	}
	if _, err := Tarball([]byte("not a tarball at all, just text that is long enough to be a header block?"), "x"); err == nil {
		t.Error("garbage: got no error")
	}
}

// The tree hash is what the host computes after unpacking with GNU tar:
// find, sort and sha256sum over the real folder (rollout's agent runs the
// same pipeline).
func TestTreeHashIsWhatTheHostComputes(t *testing.T) {
	for _, tool := range []string{"tar", "sha256sum", "find", "sort"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	r, err := Tarball(makeTar(t, true, goodMembers...), "bin/myrelay")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tarball := filepath.Join(dir, "r.tar")
	os.WriteFile(tarball, r.Data, 0o644)
	into := filepath.Join(dir, "unpacked")
	os.Mkdir(into, 0o755)
	if out, err := exec.Command("tar", "-x", "-f", tarball, "-C", into, "--no-same-owner", "--no-same-permissions").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	cmd := exec.Command("sh", "-c", `find . -type f -print | LC_ALL=C sort | while IFS= read -r f; do sha256sum -- "$f"; done | sha256sum`)
	cmd.Dir = into
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out))[0]; got != r.TreeSHA256 {
		t.Errorf("host tree hash %s, artifact's %s", got, r.TreeSHA256)
	}
}

func TestFolderPacksTheSameBytesEachTime(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "myrelay"), []byte("#!/bin/sh\n"), 0o775) // group write is dropped
	os.WriteFile(filepath.Join(dir, "config.txt"), []byte("x\n"), 0o644)
	a, err := Folder(dir, "bin/myrelay")
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "config.txt"), later, later)
	b, err := Folder(dir, "bin/myrelay")
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 || a.Files != 2 {
		t.Errorf("packed twice: %s then %s (%d files)", a.SHA256, b.SHA256, a.Files)
	}
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
	if _, err := Folder(dir, "bin/myrelay"); err == nil || !strings.Contains(err.Error(), "only regular files and folders") {
		t.Errorf("folder with a symlink: got %v", err)
	}
}

func FuzzTarball(f *testing.F) {
	f.Add(makeTar(f, false, goodMembers...), "bin/myrelay")
	f.Add(makeTar(f, true, goodMembers...), "bin/myrelay")
	f.Add(makeTar(f, false, member{name: "../x", mode: 0o644, body: "x"}), "x")
	f.Fuzz(func(t *testing.T, data []byte, program string) {
		r, err := Tarball(data, program)
		if err != nil {
			return
		}
		if r.Program == nil || len(r.TreeSHA256) != 64 {
			t.Fatalf("accepted a tarball without its program or tree hash")
		}
	})
}

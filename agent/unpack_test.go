package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/artifact"
)

// Whatever bytes a release file holds, unpacking them makes nothing but
// root's regular files and folders inside the folder unpacked into,
// nothing group- or other-writable, no set-id bit; and a tarball that
// both relayctl and the agent take hashes to one tree on both sides.
func FuzzUnpackRelease(f *testing.F) {
	f.Add(makeTar(f, true, goodMembers...))
	f.Add(makeTar(f, false, goodMembers...))
	f.Add(makeTar(f, false, member{name: "./", typ: tar.TypeDir, mode: 0o700}, member{name: "./a/b", mode: 0o755, body: "x"}))
	f.Add(makeTar(f, false, member{name: "bin/lib", typ: tar.TypeSymlink, link: "/etc"}))
	f.Add(makeTar(f, false, member{name: "../evil", mode: 0o644, body: "x"}))
	f.Add(makeTar(f, false, member{name: "a", mode: 0o644, body: "x"}, member{name: "a/b", mode: 0o644, body: "y"}))
	f.Add(makeTar(f, false, member{name: "x", mode: 0o4755, body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		root, _ := testRoot(t)
		dest := filepath.Join(root, "dest")
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		err := unpackRelease(bytes.NewReader(data), dest)
		if entries, _ := os.ReadDir(root); len(entries) != 1 {
			t.Fatalf("made beside the folder: %v", entries)
		}
		walkErr := filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() && !fi.IsDir() || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 || fi.Mode().Perm()&0o022 != 0 || !ownedByRootOnly(p) {
				t.Errorf("%s: %v", p, fi.Mode())
			}
			return nil
		})
		if walkErr != nil {
			t.Fatal(walkErr)
		}
		if err != nil {
			return
		}
		program := firstProgram(data)
		if program == "" {
			return
		}
		if r, aerr := artifact.Tarball(data, program); aerr == nil {
			if got, _ := treeOf(dest); got != r.TreeSHA256 {
				t.Errorf("the agent's tree hash %s, relayctl's %s", got, r.TreeSHA256)
			}
		}
	})
}

// firstProgram is the first executable regular member of a tarball's
// (after what tar reads), "" when none can be read.
func firstProgram(data []byte) string {
	stream, err := tarStream(bytes.NewReader(data))
	if err != nil {
		return ""
	}
	tr := tar.NewReader(stream)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) || err != nil {
			return ""
		}
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
			return strings.TrimPrefix(path.Clean(h.Name), "./")
		}
	}
}

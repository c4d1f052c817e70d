package artifact

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Folder packs a local release folder into a tarball, the same bytes for
// the same files whoever packs it and whenever (names sorted, owner root,
// a fixed time, modes without group or other write), and reads it as
// Tarball does. Symlinks and other special files are refused: the hosts
// would unpack what the folder's owner could point anywhere.
func Folder(dir, program string) (Release, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	var total int64
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if n++; n > MaxMembers {
			return fmt.Errorf("the folder holds more than %d files and folders", MaxMembers)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0), Mode: int64(info.Mode().Perm() &^ 0o022), Format: tar.FormatPAX}
		switch {
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		default:
			return fmt.Errorf("%s is a %s: a release folder holds only regular files and folders", p, info.Mode().Type())
		}
		if total += h.Size; total > MaxUnpackedBytes {
			return fmt.Errorf("the folder holds more than %d bytes", int64(MaxUnpackedBytes))
		}
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			return copyFile(w, p, h.Size)
		}
		return nil
	})
	if err != nil {
		return Release{}, fmt.Errorf("pack the release folder %s: %w", dir, err)
	}
	if err := w.Close(); err != nil {
		return Release{}, err
	}
	return Tarball(buf.Bytes(), program)
}

// copyFile copies exactly size bytes of the file (one that changes while
// packed fails the pack rather than ship something else).
func copyFile(w io.Writer, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size+1))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed size while it was packed", p)
	}
	return err
}

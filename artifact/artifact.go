// Package artifact reads a release as relayctl ships it: one program file,
// a tarball (.tar or .tar.gz) or a local folder, which it packs into a
// tarball. A tarball is unpacked by root on every host, so it is read here
// first, before any host sees it: only regular files and folders, names of
// plain characters inside the release (no absolute path, no .., no
// symlink or hard link that could lead out of it), no set-id bit, the
// program among its files and executable. Its tree hash is what a host
// compares after unpacking (rollout's place and check primitives).
package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// Limits on what a tarball may hold once unpacked.
const (
	MaxMembers       = 10000
	MaxUnpackedBytes = 2 << 30
)

// Release is a release read from its bytes.
type Release struct {
	Data   []byte // what is shipped: the program file, or the (possibly gzipped) tar
	SHA256 string // of Data
	// Program is the program's own bytes (Data for a binary), where
	// capability markers are read.
	Program []byte
	// TreeSHA256 (tarballs) is the sha256 of the release's file listing,
	// one "SHA256  ./PATH\n" line per regular file sorted by path, as
	// sha256sum prints it on a host for the unpacked folder.
	TreeSHA256 string
	Files      int // regular files in a tarball
}

// Binary is a release of one program file.
func Binary(data []byte) Release {
	return Release{Data: data, SHA256: sum(data), Program: data}
}

// memberRe are the names a tarball member may have: plain characters,
// as the agent's shell passes them without quoting surprises.
var memberRe = lazyre.New(`^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$`)

// Tarball reads a .tar or .tar.gz release whose program is at program
// (a path inside it).
func Tarball(data []byte, program string) (Release, error) {
	r, err := tarReader(data)
	if err != nil {
		return Release{}, err
	}
	files := map[string]string{} // path → sha256
	dirs := map[string]bool{}
	var prog []byte
	var total int64
	for n := 0; ; n++ {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Release{}, fmt.Errorf("read the tarball: %w", err)
		}
		if n >= MaxMembers {
			return Release{}, fmt.Errorf("the tarball holds more than %d members", MaxMembers)
		}
		name, err := memberName(h)
		if err != nil {
			return Release{}, err
		}
		if _, file := files[name]; file || h.Typeflag != tar.TypeDir && dirs[name] {
			return Release{}, fmt.Errorf("tarball member %s appears twice: the second would replace the first on unpacking", name)
		}
		if h.Typeflag == tar.TypeDir {
			dirs[name] = true
			continue
		}
		if _, dup := files[name]; dup {
			return Release{}, fmt.Errorf("tarball member %s appears twice: the second would replace the first on unpacking", name)
		}
		total += h.Size
		if total > MaxUnpackedBytes {
			return Release{}, fmt.Errorf("the tarball unpacks to more than %d bytes", int64(MaxUnpackedBytes))
		}
		hash := sha256.New()
		var body bytes.Buffer
		w := io.Writer(hash)
		if name == program {
			w = io.MultiWriter(hash, &body)
			if h.Mode&0o111 == 0 {
				return Release{}, fmt.Errorf("the program %s in the tarball is not executable (mode %04o)", program, h.Mode&0o7777)
			}
		}
		if _, err := io.Copy(w, r); err != nil {
			return Release{}, fmt.Errorf("read tarball member %s: %w", name, err)
		}
		files[name] = hex.EncodeToString(hash.Sum(nil))
		if name == program {
			prog = body.Bytes()
		}
	}
	if prog == nil {
		return Release{}, fmt.Errorf("the tarball holds no file %s (relay.release.program); it holds %s", program, listSome(files))
	}
	return Release{Data: data, SHA256: sum(data), Program: prog, TreeSHA256: TreeHash(files), Files: len(files)}, nil
}

// memberName checks one member: a regular file or a folder, a plain name
// inside the release, no set-id or sticky bit, no write for group or
// others (the agent refuses such a release after unpacking anyway).
func memberName(h *tar.Header) (string, error) {
	raw := h.Name
	name := strings.TrimPrefix(strings.TrimSuffix(raw, "/"), "./")
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink, tar.TypeLink:
		return "", fmt.Errorf("tarball member %q is a link (to %q): a release holds only files and folders, which cannot lead out of it when root unpacks them", raw, h.Linkname)
	default:
		return "", fmt.Errorf("tarball member %q is of type %q: a release holds only regular files and folders", raw, string(h.Typeflag))
	}
	if raw == "./" || raw == "." {
		return ".", nil
	}
	if !memberRe.MatchString(name) || path.Clean(name) != name || strings.HasPrefix(raw, "/") || hasDotDot(name) {
		return "", fmt.Errorf("tarball member %q: want a path inside the release of letters, digits and ._+- (no leading /, no ..)", raw)
	}
	if h.Mode&0o7000 != 0 {
		return "", fmt.Errorf("tarball member %q has a set-id or sticky bit (mode %04o)", raw, h.Mode&0o7777)
	}
	if h.Mode&0o022 != 0 {
		return "", fmt.Errorf("tarball member %q is writable by its group or others (mode %04o): whoever could change it would run as root", raw, h.Mode&0o7777)
	}
	return name, nil
}

func hasDotDot(name string) bool {
	for _, s := range strings.Split(name, "/") {
		if s == ".." {
			return true
		}
	}
	return false
}

// tarReader opens a plain or gzipped tar.
func tarReader(data []byte) (*tar.Reader, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		z, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("read the gzipped tarball: %w", err)
		}
		return tar.NewReader(z), nil
	}
	return tar.NewReader(bytes.NewReader(data)), nil
}

// TreeHash is the sha256 of a release folder's listing: one
// "SHA256  ./PATH\n" line per regular file, sorted by path, as
// `find . -type f | LC_ALL=C sort` and sha256sum print it.
func TreeHash(files map[string]string) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, "./"+n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(files[n[2:]] + "  " + n + "\n")
	}
	return sum([]byte(b.String()))
}

func listSome(files map[string]string) string {
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 5 {
		names = append(names[:5], "…")
	}
	if len(names) == 0 {
		return "no files"
	}
	return strings.Join(names, ", ")
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

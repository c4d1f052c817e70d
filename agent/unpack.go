package agent

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/relayctl/relayctl/artifact"
)

// maxTarStream bounds the bytes of a tarball's tar stream (after gzip):
// its files' bytes (artifact.MaxUnpackedBytes, checked by their headers)
// and room for headers, long names and padding. A gzip stream that
// unpacks to more is stopped there.
const maxTarStream = artifact.MaxUnpackedBytes + 256<<20

// unpackRelease unpacks a .tar or .tar.gz release into the folder dest,
// made empty for it, by the rules relayctl read the release by
// (artifact.MemberName): regular files and folders only, plain names
// inside the release, no set-id bit, nothing group- or other-writable;
// each member once; at most artifact.MaxMembers members and
// artifact.MaxUnpackedBytes bytes. Root owns what it makes; folders take
// their member's mode once their files are in.
func unpackRelease(src io.Reader, dest string) error {
	stream, err := tarStream(src)
	if err != nil {
		return err
	}
	u := unpacker{dest: dest, seen: map[string]byte{}, dirModes: map[string]fs.FileMode{}}
	tr := tar.NewReader(stream)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.readError(err)
		}
		if err := u.member(h, tr); err != nil {
			return err
		}
	}
	return u.setDirModes()
}

// tarStream is src's tar stream: gunzipped when src is gzip, and bounded
// by maxTarStream either way.
func tarStream(src io.Reader) (io.Reader, error) {
	b := bufio.NewReader(src)
	var r io.Reader = b
	if magic, _ := b.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		z, err := gzip.NewReader(b)
		if err != nil {
			return nil, fmt.Errorf("read the gzipped tarball: %v", err)
		}
		r = z
	}
	return &boundedReader{r: r, left: maxTarStream}, nil
}

// boundedReader reads at most left bytes and fails beyond them.
type boundedReader struct {
	r    io.Reader
	left int64
}

var errTarTooLong = fmt.Errorf("the tarball unpacks to more than %d bytes", int64(maxTarStream))

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errTarTooLong
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// unpacker is one tarball's unpacking.
type unpacker struct {
	dest     string
	members  int
	total    int64
	seen     map[string]byte // a member's type by name
	dirModes map[string]fs.FileMode
}

func (u *unpacker) readError(err error) error {
	if errors.Is(err, errTarTooLong) {
		return err
	}
	return fmt.Errorf("read the tarball: %v", err)
}

// member unpacks one member, after the checks relayctl made of it.
func (u *unpacker) member(h *tar.Header, body io.Reader) error {
	if u.members++; u.members > artifact.MaxMembers {
		return fmt.Errorf("the tarball holds more than %d members", artifact.MaxMembers)
	}
	name, err := artifact.MemberName(h)
	if err != nil {
		return err
	}
	if was, ok := u.seen[name]; ok && (was != tar.TypeDir || h.Typeflag != tar.TypeDir) {
		return fmt.Errorf("tarball member %s appears twice: the second would replace the first on unpacking", name)
	}
	u.seen[name] = h.Typeflag
	mode := fs.FileMode(h.Mode) & 0o755
	if h.Typeflag == tar.TypeDir {
		u.dirModes[name] = mode
		return u.mkdirs(name)
	}
	if u.total += h.Size; u.total > artifact.MaxUnpackedBytes {
		return fmt.Errorf("the tarball unpacks to more than %d bytes", int64(artifact.MaxUnpackedBytes))
	}
	if err := u.mkdirs(path.Dir(name)); err != nil {
		return err
	}
	return u.writeFile(name, mode, h.Size, body)
}

// mkdirs makes the folder name and those above it inside dest (0755 until
// their modes are set), each a real folder: one made here, never a file
// or a symlink met on the way.
func (u *unpacker) mkdirs(name string) error {
	if name == "." {
		return nil
	}
	p := u.dest
	for _, seg := range splitPath(name) {
		p += "/" + seg
		err := os.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) {
			if isDir(p) {
				continue
			}
			err = syscall.ENOTDIR
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %s", p, errText(err))
		}
	}
	return nil
}

// writeFile writes a member's size bytes as a new file (never over one,
// never through a symlink), owned by root.
func (u *unpacker) writeFile(name string, mode fs.FileMode, size int64, body io.Reader) error {
	p := u.dest + "/" + name
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("unpack %s: %s", p, errText(err))
	}
	n, err := io.Copy(f, io.LimitReader(body, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = os.Chmod(p, mode)
	}
	if err != nil {
		return u.fileError(p, err)
	}
	return nil
}

func (u *unpacker) fileError(p string, err error) error {
	if errors.Is(err, errTarTooLong) {
		return err
	}
	return fmt.Errorf("unpack %s: %s", p, errText(err))
}

// setDirModes gives the folders the tarball listed their modes, once
// their files are in.
func (u *unpacker) setDirModes() error {
	for name, mode := range u.dirModes {
		p := u.dest
		if name != "." {
			p += "/" + name
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("unpack %s: %s", p, errText(err))
		}
	}
	return nil
}

func splitPath(name string) []string {
	var out []string
	for name != "." && name != "" {
		out = append([]string{path.Base(name)}, out...)
		name = path.Dir(name)
	}
	return out
}

package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/relayctl/relayctl/uplink"
)

// A keep's data may come in a packed form (package uplink makes them):
// gzip, zstd, or a zstd patch from a release the host keeps. The agent
// decodes them itself, with the decoders and settings uplink encodes
// with, so it decodes every form wherever it runs; what can still stop
// it is a patch's base.

const encPatch = uplink.ZstdPatch

// maxPatchBase bounds the base a patch is decoded against, which is held
// in memory while it decodes: the largest window a frame relayctl makes
// may have, beyond which a patch refers no further back.
const maxPatchBase = uplink.MaxWindow

// knownEncoding: enc is a packed form the agent decodes.
func knownEncoding(enc string) error {
	switch enc {
	case uplink.Gzip, uplink.Zstd, uplink.ZstdPatch:
		return nil
	}
	return fmt.Errorf("%s is not a form the agent decodes", enc)
}

// decodable says why the agent cannot take the form enc (nil when it
// can), before its bytes are sent: a patch's base must be a regular file
// of root's alone, in a folder of root's alone, whose sha256 is baseSHA
// (a patch from other bytes decodes to other bytes).
func decodable(enc, base, baseSHA string) error {
	if err := knownEncoding(enc); err != nil || enc != encPatch {
		return err
	}
	f, err := openBase(base)
	if err != nil {
		return err
	}
	defer f.Close()
	return checkBaseSum(base, baseSHA, hashReader(f))
}

// readBase is a patch's base, read once and checked by its sha256: the
// bytes checked are the bytes decoded against.
func readBase(base, baseSHA string) ([]byte, error) {
	f, err := openBase(base)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPatchBase+1))
	if err != nil {
		return nil, fmt.Errorf("read the patch's base %s: %s", base, errText(err))
	}
	if len(b) > maxPatchBase {
		return nil, fmt.Errorf("the patch's base %s is more than %d bytes, more than the agent decodes a patch against", base, maxPatchBase)
	}
	return b, checkBaseSum(base, baseSHA, sha256Hex(b))
}

// openBase opens a patch's base, a regular file of root's alone in a
// folder of root's alone, never through a symlink.
func openBase(base string) (*os.File, error) {
	notRoots := fmt.Errorf("the patch's base %s is not a regular file of root's alone", base)
	if fi, err := os.Lstat(base); err != nil || !fi.Mode().IsRegular() || !ownedByRootOnly(base) {
		return nil, notRoots
	}
	if err := safeParent(base); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(base, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, notRoots
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, notRoots
	}
	return f, nil
}

func checkBaseSum(base, want, got string) error {
	if got == want {
		return nil
	}
	if got == "" {
		got = "none"
	}
	return fmt.Errorf("the patch's base %s has sha256 %s, not the %s it was made from", base, got, want)
}

// hashReader is the sha256 of what r holds, "" if it cannot be read.
func hashReader(r io.Reader) string {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// decodeInto decodes packed, in the form enc, into the existing file t:
// at most size+1 bytes of output (more is not the file, and a form that
// unpacks to much more, a decompression bomb, is not decoded further).
// n is the bytes written and sum their sha256; a decoder's failure is said as agent.sh's
// decoders said theirs ("gzip -d: ..."), a write's is a writeError.
func decodeInto(t, enc string, packed io.Reader, base []byte, size int64) (n int64, sum string, err error) {
	tool := strings.TrimSuffix(enc, "-patch") + " -d"
	dec, err := uplink.NewReader(enc, packed, base, size)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %v", tool, err)
	}
	defer dec.Close()
	n, sum, err = writeInto(t, dec, size)
	var werr writeError
	if err != nil && !errors.As(err, &werr) {
		err = fmt.Errorf("%s: %v", tool, err)
	}
	return n, sum, err
}

package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"syscall"
)

// sha256File is a regular file's sha256 in hex, read without following a
// symlink.
func sha256File(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

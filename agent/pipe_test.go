package agent

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestGrowStdinPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	before, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	growStdinPipe(r)
	got, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := min(wantPipe, pipeMaxSize())
	if got < want || got <= before {
		t.Errorf("stdin pipe holds %d bytes after growStdinPipe (was %d), want at least %d", got, before, want)
	}
}

func TestGrowStdinPipeLeavesAFileAlone(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	growStdinPipe(f) // must neither fail nor panic
	growStdinPipe(nil)
	growStdinPipe((*os.File)(nil))
}

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// readRegular reads a local file that relayctl was pointed at (a spec, a
// plan, an artifact, a signature): it must be a regular file, read with a
// bound. It is opened non-blocking, so a FIFO or a device cannot hang
// relayctl, and checked after opening, so what is read is what was checked.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d relayctl reads", path, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes while read", path, limit)
	}
	return data, nil
}

// writeFileAtomic writes through a temporary file and a rename, so a reader
// never sees half a file. Plans and receipts are written 0600: a plan holds
// a host's facts, and nobody else should be able to rewrite what apply
// will read.
func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	return writeFileAtomicWith(name, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeFileAtomicWith is writeFileAtomic for content written by write, as
// it is made (a receipt of 10,000 hosts is never held whole).
func writeFileAtomicWith(name string, mode os.FileMode, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// copyFile copies a file relayctl just wrote to w (a receipt to stdout).
func copyFile(w io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	return nil
}

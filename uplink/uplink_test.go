package uplink

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// releases are two releases of a program, the second a few edits from
// the first: the test binary's own bytes (a Go program, as relayd is),
// then insertions, a deletion and changed bytes, as a new build shifts
// and changes code.
func releases(t testing.TB, size int) (old, new []byte) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < size+size/2 {
		t.Fatalf("the test binary has %d bytes, fewer than %d", len(b), size+size/2)
	}
	old = bytes.Clone(b[len(b)/4 : len(b)/4+size])
	rng := rand.New(rand.NewPCG(1, 2))
	new = bytes.Clone(old)
	for i := 0; i < 40; i++ {
		at := rng.IntN(len(new) - 100)
		switch i % 3 {
		case 0:
			ins := make([]byte, 1+rng.IntN(2000))
			for j := range ins {
				ins[j] = byte(rng.Uint32())
			}
			new = append(new[:at], append(ins, new[at:]...)...)
		case 1:
			new = append(new[:at], new[at+rng.IntN(100):]...)
		default:
			new[at] ^= 0x5a
		}
	}
	return old, new
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	old, new := releases(t, 1<<20)
	for _, enc := range Encodings {
		packed, err := Encode(enc, new, old)
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		got, err := Decode(enc, packed, old, len(new))
		if err != nil || !bytes.Equal(got, new) {
			t.Fatalf("%s: decoded %d bytes (%v), want the %d encoded", enc, len(got), err, len(new))
		}
		if len(packed) >= len(new) {
			t.Errorf("%s: %d bytes packed, not fewer than the %d of the release", enc, len(packed), len(new))
		}
		if _, err := Decode(enc, packed, old, len(new)-1); err == nil {
			t.Errorf("%s: decoded past its limit", enc)
		}
	}
	patch, _ := Encode(ZstdPatch, new, old)
	zs, _ := Encode(Zstd, new, nil)
	if len(patch)*4 > len(zs) {
		t.Errorf("a patch from the release before is %d bytes, a quarter of zstd's %d at most", len(patch), len(zs))
	}
	if got, err := Decode(ZstdPatch, patch, new, len(new)); err == nil && bytes.Equal(got, new) {
		t.Errorf("a patch decoded from another base gave the release")
	}
}

func TestEncodeIsDeterministic(t *testing.T) {
	old, new := releases(t, 512<<10)
	for _, enc := range Encodings {
		a, _ := Encode(enc, new, old)
		b, _ := Encode(enc, new, old)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two encodings of the same bytes differ (%d, %d bytes)", enc, len(a), len(b))
		}
	}
}

func TestWindow(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 1 << 20}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {18 << 20, 32 << 20}, {1 << 30, MaxWindow}} {
		if got := window(c.n); got != c.want {
			t.Errorf("window(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// requireTool finds a host tool the test decodes with: missing, the test
// fails with CI=true and skips otherwise.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (apt-get install %s)", name, name)
		}
		t.Skipf("%s is not installed (set CI=true to make this a failure)", name)
	}
	return p
}

// What relayctl encodes, the hosts' own tools decode, byte for byte: the
// zstd CLI a patch with --patch-from and no --long or --memory (the
// frame names no dictionary, and its window spans base and release: 4
// MiB here), and zstd and gzip the compressed release.
func TestZstdCLIDecodes(t *testing.T) {
	zstdCLI := requireTool(t, "zstd")
	gzipCLI := requireTool(t, "gzip")
	old, new := releases(t, 2<<20)
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.WriteFile(base, old, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		enc  string
		argv []string
	}{
		{ZstdPatch, []string{zstdCLI, "-dcq", "--patch-from=" + base}},
		{Zstd, []string{zstdCLI, "-dcq"}},
		{Gzip, []string{gzipCLI, "-dc"}},
	} {
		packed, err := Encode(c.enc, new, old)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Stdin = bytes.NewReader(packed)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil || sha256.Sum256(out) != sha256.Sum256(new) {
			t.Errorf("%s: %v decoded %d bytes (%v: %s), want the release's %d", c.enc, c.argv, len(out), err, errb.String(), len(new))
		}
	}
	// A patch from other bytes does not decode to the release.
	other := filepath.Join(dir, "other")
	os.WriteFile(other, new, 0o600)
	packed, _ := Encode(ZstdPatch, new, old)
	cmd := exec.Command(zstdCLI, "-dcq", "--patch-from="+other)
	cmd.Stdin = bytes.NewReader(packed)
	if out, err := cmd.Output(); err == nil && bytes.Equal(out, new) {
		t.Errorf("the zstd CLI decoded a patch from another base to the release")
	}
}

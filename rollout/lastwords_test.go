package rollout

import (
	"testing"
	"time"
)

// A reason quotes the end of the relay's log; a Go program's crash from
// the line it begins with, since a stack trace follows it.
func TestLogEnd(t *testing.T) {
	tests := []struct{ name, log, want string }{
		{"last four lines", "a\nb\n\nc\nd\ne\n", "b | c | d | e"},
		{"a panic", "started\npanic: lobby table corrupt\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:12 +0x1d\nexit status 2\n", "panic: lobby table corrupt | goroutine 1 [running]: | main.main() | /src/main.go:12 +0x1d"},
		{"a signal", "started\nSIGSEGV: segmentation violation\nPC=0x0 m=0\n", "SIGSEGV: segmentation violation | PC=0x0 m=0"},
		{"fatal error", "fatal error: out of memory\n", "fatal error: out of memory"},
		{"not a signal", "a\nSIG: words\nSIGnal: x\n", "a | SIG: words | SIGnal: x"},
		{"escapes shown, not sent", "\x1b[31mred\n", "\\x1b[31mred"},
	}
	for _, tt := range tests {
		if got := logEnd(tt.log); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// While a relay must hold, the read-back reads it once a second (each
// reading is an observe on the host), and never past what is left.
func TestReadBackPause(t *testing.T) {
	for _, tt := range []struct {
		holding bool
		left    time.Duration
		want    time.Duration
	}{
		{false, 10 * time.Second, 200 * time.Millisecond},
		{true, 10 * time.Second, time.Second},
		{true, 500 * time.Millisecond, 500 * time.Millisecond},
		{true, 0, 200 * time.Millisecond},
	} {
		if got := readBackPause(tt.holding, tt.left); got != tt.want {
			t.Errorf("holding %v, %v left: got %v, want %v", tt.holding, tt.left, got, tt.want)
		}
	}
}

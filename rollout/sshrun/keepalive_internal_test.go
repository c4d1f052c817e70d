package sshrun

import (
	"testing"
	"time"
)

// The keepalive's rule, apart from the clock: cut at the end of the
// count-th interval in a row through which no byte was heard; any byte
// (an answer, a session's output) starts the count again.
func TestSilenceTick(t *testing.T) {
	tests := []struct {
		name  string
		count int
		heard []int64 // bytes heard so far, at each interval's end
		cutAt int     // the interval (from 1) that cuts; 0 for none
	}{
		{name: "answered", count: 3, heard: []int64{10, 20, 30, 40, 50, 60}},
		{name: "silent from the start", count: 3, heard: []int64{0, 0, 0, 0}, cutAt: 3},
		{name: "silent after an answer", count: 3, heard: []int64{10, 10, 10, 10}, cutAt: 4},
		{name: "a byte starts the count again", count: 2, heard: []int64{0, 5, 5, 6, 6, 6}, cutAt: 6},
		{name: "count 1", count: 1, heard: []int64{3, 3}, cutAt: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := silence{count: tt.count}
			got := 0
			for i, h := range tt.heard {
				if s.tick(h) {
					got = i + 1
					break
				}
			}
			if got != tt.cutAt {
				t.Errorf("cut at interval %d, want %d", got, tt.cutAt)
			}
		})
	}
}

// ssh_config's times, as OpenSSH 9.2's ssh -G reads them.
func TestOpenSSHTime(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration // 0: refused
	}{
		{"90", 90 * time.Second},
		{"10S", 10 * time.Second},
		{"1m", time.Minute},
		{"1m30s", 90 * time.Second},
		{"1m30", 90 * time.Second},
		{"1h1h", 2 * time.Hour},
		{"2W", 14 * 24 * time.Hour},
		{"2147483647", 2147483647 * time.Second},
		{"0s", 0},
		{"3000000000", 0},
		{"99999999999", 0},
		{"-1", 0},
		{"1.5", 0},
		{"x", 0},
		{"1x", 0},
		{"", 0},
	}
	for _, tt := range tests {
		got, err := openSSHTime(tt.in)
		if tt.want == 0 && tt.in != "0s" {
			if err == nil {
				t.Errorf("%q: got %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

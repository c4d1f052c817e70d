package tune

import (
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/relayctl/relayctl/internal/kerneltest"
)

func TestExpectRcvbuf(t *testing.T) {
	tests := []struct {
		name                 string
		requested            int
		force                bool
		rmemMax, rmemDefault int
		effective            int
		capped               bool
	}{
		{"never asks", 0, false, 212992, 212992, 212992, false},
		{"never asks, rmem_max raised", 0, false, 8388608, 212992, 212992, false},
		{"never asks, default raised", 0, false, 212992, 1048576, 1048576, false},
		{"incident: 4 MiB capped", 4194304, false, 212992, 212992, 425984, true},
		{"4 MiB fits", 4194304, false, 8388608, 212992, 8388608, false},
		{"exactly rmem_max", 212992, false, 212992, 212992, 425984, false},
		{"one over rmem_max", 212993, false, 212992, 212992, 425984, true},
		{"tiny request floored", 1, false, 212992, 212992, 2304, false},
		{"half of minimum", 1152, false, 212992, 212992, 2304, false},
		{"just above minimum", 1153, false, 212992, 212992, 2306, false},
		{"negative is huge as u32", -1, false, 212992, 212992, 425984, true},
		{"force ignores rmem_max", 4194304, true, 212992, 212992, 8388608, false},
		{"force negative is zero", -5, true, 212992, 212992, 2304, false},
		{"force beyond INT_MAX/2", 1 << 30, true, 212992, 212992, 2147483646, false},
		{"rmem_max at INT_MAX", 2147483647, false, 2147483647, 212992, 2147483646, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ExpectRcvbuf(tt.requested, tt.force, tt.rmemMax, tt.rmemDefault)
			if e.Effective != tt.effective || e.Capped != tt.capped {
				t.Errorf("ExpectRcvbuf(%d, %v, %d, %d): got rb %d capped %v, want rb %d capped %v",
					tt.requested, tt.force, tt.rmemMax, tt.rmemDefault, e.Effective, e.Capped, tt.effective, tt.capped)
			}
			if e.Requested != tt.requested || e.Force != tt.force || e.RmemMax != tt.rmemMax || e.RmemDefault != tt.rmemDefault {
				t.Errorf("ExpectRcvbuf: inputs not carried: got %+v", e)
			}
			if w := e.Warning(); (w != "") != tt.capped {
				t.Errorf("Warning: got %q, want a warning only when capped (%v)", w, tt.capped)
			}
		})
	}
}

func TestRcvbufWarning(t *testing.T) {
	got := ExpectRcvbuf(4194304, false, 212992, 212992).Warning()
	want := "the relay asks for SO_RCVBUF 4194304 (4096 KiB) but net.core.rmem_max is 212992: " +
		"the kernel caps it silently and the socket will read back rb 425984 (416 KiB), not 8388608"
	if got != want {
		t.Errorf("Warning:\ngot  %q\nwant %q", got, want)
	}
	got = ExpectRcvbuf(1000000, false, 300000, 212992).Warning()
	want = "the relay asks for SO_RCVBUF 1000000 (976.6 KiB) but net.core.rmem_max is 300000: " +
		"the kernel caps it silently and the socket will read back rb 600000 (585.9 KiB), not 2000000"
	if got != want {
		t.Errorf("Warning:\ngot  %q\nwant %q", got, want)
	}
}

func TestNeverAsksWarning(t *testing.T) {
	tests := []struct {
		name                 string
		before, after, deflt int
		want                 string
	}{
		{"raised", 212992, 8388608, 212992, "raising net.core.rmem_max from 212992 to 8388608 changes nothing " +
			"for a relay that never calls setsockopt(SO_RCVBUF): its socket keeps rb 212992 (208 KiB), " +
			"the value of net.core.rmem_default; raise net.core.rmem_default (the buffer every new socket gets), or ship a release that requests SO_RCVBUF"},
		{"unchanged", 212992, 212992, 212992, ""},
		{"lowered", 8388608, 212992, 212992, ""},
	}
	for _, tt := range tests {
		if got := NeverAsksWarning(tt.before, tt.after, tt.deflt); got != tt.want {
			t.Errorf("%s: NeverAsksWarning(%d, %d, %d):\ngot  %q\nwant %q", tt.name, tt.before, tt.after, tt.deflt, got, tt.want)
		}
	}
}

// rcvbufOf opens a udp4 socket, optionally sets SO_RCVBUF(FORCE) to
// requested, and returns what getsockopt reads back.
func rcvbufOf(t *testing.T, requested int, force bool) int {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp4: %v", err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatalf("syscall conn: %v", err)
	}
	var got int
	var serr error
	err = raw.Control(func(fd uintptr) {
		if requested != 0 {
			opt := syscall.SO_RCVBUF
			if force {
				opt = syscall.SO_RCVBUFFORCE
			}
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, requested); serr != nil {
				return
			}
		}
		got, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	if err != nil || serr != nil {
		t.Fatalf("set/get SO_RCVBUF %d: %v %v", requested, err, serr)
	}
	return got
}

// TestExpectRcvbufKernel checks the rule against the running kernel at the
// current rmem_max and at two values set here.
func TestExpectRcvbufKernel(t *testing.T) {
	kerneltest.Lock(t)
	atoi := func(key string) int {
		n, err := strconv.Atoi(kerneltest.Read(t, key))
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		return n
	}
	requests := []int{0, 1, 1152, 1153, 4096, 106496, 212992, 212993, 1048576, 4194304, 16777216}
	settings := []struct{ rmemMax, rmemDefault string }{
		{"", ""}, // as found
		{"212992", "212992"},
		{"8388608", "262144"},
	}
	for _, s := range settings {
		if s.rmemMax != "" {
			kerneltest.Set(t, "net.core.rmem_max", s.rmemMax)
			kerneltest.Set(t, "net.core.rmem_default", s.rmemDefault)
		}
		rmemMax, rmemDefault := atoi("net.core.rmem_max"), atoi("net.core.rmem_default")
		for _, req := range requests {
			for _, force := range []bool{false, true} {
				if force && req == 0 {
					continue
				}
				want := ExpectRcvbuf(req, force, rmemMax, rmemDefault)
				if got := rcvbufOf(t, req, force); got != want.Effective {
					t.Errorf("rmem_max %d rmem_default %d, request %d force %v: kernel rb %d, ExpectRcvbuf %d",
						rmemMax, rmemDefault, req, force, got, want.Effective)
				}
			}
		}
	}
	if t.Failed() {
		t.Log("kernel:", strings.TrimSpace(kerneltest.Read(t, "kernel.osrelease")))
	}
}

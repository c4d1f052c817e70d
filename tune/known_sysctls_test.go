package tune

import (
	"strings"
	"testing"
)

func TestKnownSysctlsList(t *testing.T) {
	if k := KnownSysctlsKernel(); !strings.HasPrefix(k, "6.") {
		t.Errorf("KnownSysctlsKernel() = %q, want the kernel release from the list's header", k)
	}
	// Every key relayctl has rules for is a sysctl of that kernel.
	for _, k := range KnownKeys() {
		if !IsKnownSysctl(k) {
			t.Errorf("IsKnownSysctl(%q) = false; it is in tune's table of known keys", k)
		}
	}
}

func TestIsKnownSysctl(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"net.core.rmem_max", true},
		{"net.ipv4.udp_mem", true},
		{"net.ipv4.conf.all.rp_filter", true},
		{"net.ipv4.conf.ens5.rp_filter", true}, // any interface name
		{"net.ipv4.neigh.bond0.gc_stale_time", true},
		{"net.core.rmem_maxx", false},
		{"net.ipv4.conf.ens5.rp_filtr", false},
		{"net.ipv4.conf.rp_filter", false}, // the interface missing
		{"net.core", false},                // a folder, not a key
	}
	for _, tt := range tests {
		if got := IsKnownSysctl(tt.key); got != tt.want {
			t.Errorf("IsKnownSysctl(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestNearestSysctl(t *testing.T) {
	tests := []struct {
		key  string
		want string // "" for no suggestion
	}{
		{"net.core.rmem_maxx", "net.core.rmem_max"},
		{"net.core.rmemmax", "net.core.rmem_max"},
		{"NET.CORE.RMEM_MAX", "net.core.rmem_max"},
		{"net.core.wmem_defualt", "net.core.wmem_default"},
		{"net.ipv4.udp_rmem_mn", "net.ipv4.udp_rmem_min"},
		{"net.ipv4.conf.ens5.rp_filtr", "net.ipv4.conf.ens5.rp_filter"},
		{"net.core.rmem_max", ""}, // exact: nothing to suggest
		{"vendor.acme.turbo_mode", ""},
	}
	for _, tt := range tests {
		got, ok := NearestSysctl(tt.key)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("NearestSysctl(%q) = %q, %v; want %q", tt.key, got, ok, tt.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", 5, 0},
		{"abc", "abc", 5, 0},
		{"abc", "abd", 5, 1},
		{"abc", "abcd", 5, 1},
		{"kitten", "sitting", 5, 3},
		{"kitten", "sitting", 2, 3}, // above the limit: limit+1
		{"a", "abcdefgh", 3, 4},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b, tt.limit); got != tt.want {
			t.Errorf("editDistance(%q, %q, %d) = %d, want %d", tt.a, tt.b, tt.limit, got, tt.want)
		}
	}
}

func TestUnknownSysctlHint(t *testing.T) {
	got := UnknownSysctlHint("net.core.rmem_maxx")
	want := "not a sysctl of Linux " + KnownSysctlsKernel() + " (the list relayctl ships, tune/known_sysctls.txt); did you mean net.core.rmem_max?"
	if got != want {
		t.Errorf("UnknownSysctlHint = %q, want %q", got, want)
	}
}

func TestParseSysctlList(t *testing.T) {
	l := parseSysctlList("# comment\nkernel 6.1.0\nnet.core.a\nnet.ipv4.conf.*.b\n\n")
	if l.kernel != "6.1.0" || !l.keys["net.core.a"] || len(l.patterns) != 1 || len(l.all) != 2 {
		t.Errorf("parseSysctlList = %+v", l)
	}
}

// The did-you-mean runs once per unknown key of a spec: go test -bench Nearest ./tune
func BenchmarkNearestSysctl(b *testing.B) {
	knownList()
	for b.Loop() {
		NearestSysctl("net.core.rmem_maxx")
	}
}

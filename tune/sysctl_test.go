package tune

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestValidKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"plain", "net.core.rmem_max", true},
		{"two segments", "kernel.pid_max", true},
		{"dash and digits", "net.ipv4.conf.eth-0.rp_filter", true},
		{"upper case", "net.ipv4.conf.ETH0.rp_filter", true},
		{"max length", "a." + strings.Repeat("b", 126), true},
		{"too long", "a." + strings.Repeat("b", 127), false},
		{"empty", "", false},
		{"one segment", "rmem_max", false},
		{"empty segment", "net..rmem_max", false},
		{"leading dot", ".net.core", false},
		{"trailing dot", "net.core.", false},
		{"segment starts with dash", "net.-core.rmem_max", false},
		{"parent dir", "net.core/../../etc", false},
		{"dotdot segment", "net...core", false},
		{"slash", "net/core/rmem_max", false},
		{"space", "net.core.rmem max", false},
		{"glob", "net.ipv4.conf.*.rp_filter", false},
		{"question", "net.core.rmem_ma?", false},
		{"shell", "net.core.rmem_max;reboot", false},
		{"dollar", "net.core.$x", false},
		{"newline", "net.core.rmem_max\n", false},
		{"tab", "net.core\trmem_max", false},
		{"non-ascii", "net.core.rmém_max", false},
		{"equals", "net.core.rmem_max=1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidKey(tt.key)
			if got := err == nil; got != tt.ok {
				t.Fatalf("ValidKey(%q) = %v, want ok=%v", tt.key, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "like net.core.rmem_max") {
				t.Errorf("error %q does not say what a valid key looks like", err)
			}
		})
	}
}

func TestProcPath(t *testing.T) {
	tests := []struct{ key, want string }{
		{"net.core.rmem_max", "/proc/sys/net/core/rmem_max"},
		{"net.ipv4.udp_mem", "/proc/sys/net/ipv4/udp_mem"},
		{"kernel.pid_max", "/proc/sys/kernel/pid_max"},
	}
	for _, tt := range tests {
		if got := ProcPath(tt.key); got != tt.want {
			t.Errorf("ProcPath(%q): got %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestNormalizeEqual(t *testing.T) {
	tests := []struct {
		name, a, b string
		norm       string // Normalize(a)
		equal      bool
	}{
		{"tabs from /proc", "575799\t767734\t1151598\n", "575799 767734 1151598", "575799 767734 1151598", true},
		{"runs of spaces", "  4096   131072  6291456 ", "4096 131072 6291456", "4096 131072 6291456", true},
		{"mixed tabs and spaces", "1 \t 2\t\t3", "1 2 3", "1 2 3", true},
		{"single", "212992\n", "212992", "212992", true},
		{"different", "212992", "8388608", "212992", false},
		{"field missing", "1 2", "1 2 3", "1 2", false},
		{"empty", " \t\n", "", "", true},
		{"not numeric equality", "010", "10", "010", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Normalize(tt.a); got != tt.norm {
				t.Errorf("Normalize(%q): got %q, want %q", tt.a, got, tt.norm)
			}
			if got := Equal(tt.a, tt.b); got != tt.equal {
				t.Errorf("Equal(%q, %q): got %v, want %v", tt.a, tt.b, got, tt.equal)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		key    string
		fields int
		global bool
		absent bool
	}{
		{"net.core.rmem_max", 1, true, false},
		{"net.core.rmem_default", 1, true, false},
		{"net.core.wmem_max", 1, true, false},
		{"net.core.wmem_default", 1, true, false},
		{"net.core.netdev_max_backlog", 1, true, true},
		{"net.core.somaxconn", 1, false, false},
		{"net.core.optmem_max", 1, false, false},
		{"net.ipv4.udp_rmem_min", 1, false, false},
		{"net.ipv4.udp_wmem_min", 1, false, false},
		{"net.ipv4.udp_mem", 3, true, true},
		{"net.ipv4.tcp_rmem", 3, false, false},
		{"net.ipv4.tcp_wmem", 3, false, false},
		{"net.ipv4.ip_local_port_range", 2, false, false},
		{"net.ipv4.ip_unprivileged_port_start", 1, false, false},
		{"net.ipv4.ping_group_range", 2, false, false},
	}
	for _, tt := range tests {
		info, ok := Lookup(tt.key)
		if !ok {
			t.Errorf("Lookup(%q): not known", tt.key)
			continue
		}
		if info.Fields != tt.fields || info.Global != tt.global || info.AbsentInNetns != tt.absent {
			t.Errorf("Lookup(%q): got fields %d global %v absent %v, want %d %v %v",
				tt.key, info.Fields, info.Global, info.AbsentInNetns, tt.fields, tt.global, tt.absent)
		}
		if info.Doc == "" || info.Unit == "" {
			t.Errorf("Lookup(%q): empty Doc or Unit", tt.key)
		}
	}
	if _, ok := Lookup("net.core.nonexistent"); ok {
		t.Error("Lookup(net.core.nonexistent): got known, want unknown")
	}
	if got, want := len(KnownKeys()), len(tests); got != want {
		t.Errorf("KnownKeys: got %d keys, want %d (add the new key to this table)", got, want)
	}
}

// TestKeyTableMatchesKernel checks every Global and AbsentInNetns claim of
// the key table against this machine's kernel, from inside a fresh network
// namespace, the way the claims were first verified (kernel 6.18).
func TestKeyTableMatchesKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to create a network namespace (the lab runs every test as root)")
	}
	for _, key := range KnownKeys() {
		info, _ := Lookup(key)
		t.Run(key, func(t *testing.T) {
			p := ProcPath(key)
			outside, err := os.Stat(p)
			if err != nil {
				t.Fatalf("stat %s in the initial namespace: %v", p, err)
			}
			if got := outside.Mode().Perm(); got != 0o644 {
				t.Errorf("mode of %s outside: got %o, want 644", p, got)
			}
			out, err := exec.Command("unshare", "-n", "sh", "-c", `stat -c %a "$1" 2>/dev/null || echo absent`, "sh", p).CombinedOutput()
			if err != nil {
				t.Fatalf("unshare -n stat %s: %v: %s", p, err, out)
			}
			want := "644"
			switch {
			case info.AbsentInNetns:
				want = "absent"
			case info.Global:
				want = "444"
			}
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("%s inside a child netns: got %s, want %s", p, got, want)
			}
		})
	}
}

func TestValidateValue(t *testing.T) {
	tests := []struct {
		name, key, value string
		wantErr          string // "" = valid
	}{
		{"one integer", "net.core.rmem_max", "8388608", ""},
		{"one integer with spaces", "net.core.rmem_max", " 8388608\n", ""},
		{"suffix", "net.core.rmem_max", "8M", `net.core.rmem_max wants one integer (bytes), got "8M"; e.g. 8388608, which is 8 MiB in bytes`},
		{"suffix MiB", "net.core.rmem_max", "4MiB", `got "4MiB"; e.g. 4194304, which is 4 MiB in bytes`},
		{"suffix k", "net.core.rmem_default", "256k", `got "256k"; e.g. 262144, which is 256 KiB in bytes`},
		{"suffix out of range", "net.core.rmem_max", "8G", `got "8G"; e.g. 8388608`},
		{"suffix of pages", "net.ipv4.udp_mem", "8M", `got "8M"; e.g. 764688 1019584 1529376`},
		{"two for one", "net.core.rmem_max", "1 2", `net.core.rmem_max wants one integer (bytes), got "1 2"; e.g. 8388608`},
		{"empty numeric", "net.core.rmem_max", "", `net.core.rmem_max wants one integer (bytes), got ""`},
		{"negative", "net.core.somaxconn", "-1", `net.core.somaxconn wants one integer (connections), each from 0 to 2147483647, got "-1"; e.g. 4096`},
		{"below SOCK_MIN_RCVBUF", "net.core.rmem_default", "2303", `net.core.rmem_default wants one integer (bytes), each from 2304 to 2147483647, got "2303"`},
		{"at SOCK_MIN_RCVBUF", "net.core.rmem_default", "2304", ""},
		{"below SOCK_MIN_SNDBUF", "net.core.wmem_max", "4607", "each from 4608"},
		{"above int", "net.core.rmem_max", "2147483648", "each from 2304 to 2147483647"},
		{"int max", "net.core.rmem_max", "2147483647", ""},
		{"beyond int64", "net.ipv4.udp_mem", "1 2 9223372036854775808", `net.ipv4.udp_mem wants three integers (pages), got "1 2 9223372036854775808"`},
		{"three tabs", "net.ipv4.udp_mem", "575799\t767734\t1151598", ""},
		{"three of two", "net.ipv4.tcp_rmem", "4096 131072", `net.ipv4.tcp_rmem wants three integers (bytes), got "4096 131072"`},
		{"hex", "net.ipv4.tcp_rmem", "0x10 1 2", "wants three integers"},
		{"float", "net.core.somaxconn", "1.5", "wants one integer"},
		{"unknown text", "kernel.core_pattern", "core.%e.%p", ""},
		{"port range with tab", "net.ipv4.ip_local_port_range", "32768\t60999", ""},
		{"port range first above last", "net.ipv4.ip_local_port_range", "40000 30000", "net.ipv4.ip_local_port_range is a range, first then last, and the kernel refuses a first above the last (EINVAL): got 40000 30000; write 30000 40000"},
		{"port range of one port", "net.ipv4.ip_local_port_range", "30000 30000", ""},
		{"port range from 0", "net.ipv4.ip_local_port_range", "0 100", "each from 1 to 65535"},
		{"port range past 65535", "net.ipv4.ip_local_port_range", "2000 70000", "each from 1 to 65535"},
		{"ping groups of nobody", "net.ipv4.ping_group_range", "1 0", ""},
		{"ping groups past gid max", "net.ipv4.ping_group_range", "0 4294967295", "each from 0 to 2147483647"},
		{"unprivileged port past 65535", "net.ipv4.ip_unprivileged_port_start", "65536", "each from 0 to 65535"},
		{"tcp_rmem of zero", "net.ipv4.tcp_rmem", "0 1 2", "each from 1 to 2147483647"},
		{"tcp_rmem below a kernel's floor", "net.ipv4.tcp_rmem", "1 1 1", `net.ipv4.tcp_rmem wants each integer at least 4096: Linux 6.18.44-fc refuses less (EINVAL), though other kernels take 1; got "1 1 1"; e.g. 4096 131072 6291456`},
		{"tcp_rmem max below a kernel's floor", "net.ipv4.tcp_rmem", "4096 4096 4095", "at least 4096"},
		{"tcp_rmem at a kernel's floor", "net.ipv4.tcp_rmem", "4096 4096 4096", ""},
		{"tcp_wmem of ones", "net.ipv4.tcp_wmem", "1 1 1", ""},
		{"tcp_rmem out of order", "net.ipv4.tcp_rmem", "6291456 131072 4096", "net.ipv4.tcp_rmem is min, default, max, each at least the one before: got 6291456 131072 4096, out of order"},
		{"udp_mem out of order", "net.ipv4.udp_mem", "3 2 1", "memory pressure would begin above the hard limit"},
		{"unknown newline", "kernel.core_pattern", "a\nb", "printable text on one line"},
		{"unknown control", "kernel.core_pattern", "a\x1bb", "printable text on one line"},
		{"unknown invalid utf8", "kernel.core_pattern", "a\xffb", "printable text on one line"},
		{"unknown empty", "kernel.core_pattern", "  ", "non-empty"},
		{"unknown max", "kernel.core_pattern", strings.Repeat("x", 256), ""},
		{"unknown too long", "kernel.core_pattern", strings.Repeat("x", 257), "at most 256 characters, got 257"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateValue(tt.key, tt.value)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ValidateValue(%q, %q): got %v, want nil", tt.key, tt.value, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("ValidateValue(%q, %q): got nil, want error containing %q", tt.key, tt.value, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("ValidateValue(%q, %q): got %q, want it to contain %q", tt.key, tt.value, err, tt.wantErr)
			}
		})
	}
}

// A floor some kernel builds hold is the rule on those kernels only:
// ValidateValueOn and MinFor follow the release, ValidateValue holds a
// spec to every kernel relayctl knows.
func TestBuildFloorsFollowTheRelease(t *testing.T) {
	tests := []struct {
		release, value string
		min            int64
		taken          bool
	}{
		{"6.18.44-fc-v1294", "1 1 1", 4096, false},
		{"6.18.44-fc-v1272", "4095 4096 4096", 4096, false},
		{"6.18.44-fc-v1272", "4096 4096 4096", 4096, true},
		{"6.1.0-18-amd64", "1 1 1", 1, true},
		{"6.18.44", "1 1 1", 1, true},
		{"", "1 131072 6291456", 1, true},
	}
	for _, tt := range tests {
		err := ValidateValueOn("net.ipv4.tcp_rmem", tt.value, tt.release)
		if (err == nil) != tt.taken {
			t.Errorf("ValidateValueOn(tcp_rmem, %q, %q): got %v, want taken %v", tt.value, tt.release, err, tt.taken)
		}
		if got := MinFor("net.ipv4.tcp_rmem", tt.release); got != tt.min {
			t.Errorf("MinFor(tcp_rmem, %q): got %d, want %d", tt.release, got, tt.min)
		}
	}
	if got := MinFor("net.ipv4.tcp_wmem", "6.18.44-fc-v1294"); got != 1 {
		t.Errorf("MinFor(tcp_wmem, 6.18.44-fc): got %d, want 1", got)
	}
}

// The range rules are the kernel's: every value ValidateValue refuses for
// its bounds or order, and CheckPairs for the pair, the kernel refuses too
// (EINVAL), and every one it allows the kernel takes, written in a fresh
// network namespace (these keys are per namespace). A floor that differs
// between kernel builds is held to the kernel at hand (ValidateValueOn).
func TestRangeRulesMatchKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to create a network namespace (the lab runs every test as root)")
	}
	rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	release := strings.TrimSpace(string(rel))
	t.Logf("kernel %s", release)
	tests := []struct{ key, value string }{
		{"net.ipv4.ip_local_port_range", "40000 30000"},
		{"net.ipv4.ip_local_port_range", "30000 30000"},
		{"net.ipv4.ip_local_port_range", "0 100"},
		{"net.ipv4.ip_local_port_range", "1024 65535"},
		{"net.ipv4.ip_local_port_range", "2000 70000"},
		{"net.ipv4.ip_local_port_range", "1000 2000"}, // below the default unprivileged start, 1024
		{"net.ipv4.ping_group_range", "1 0"},
		{"net.ipv4.ping_group_range", "0 2147483647"},
		{"net.ipv4.ping_group_range", "0 4294967295"},
		{"net.ipv4.ip_unprivileged_port_start", "65536"},
		{"net.ipv4.ip_unprivileged_port_start", "40000"}, // above the default range's first, 32768
		{"net.ipv4.tcp_rmem", "0 1 2"},
		{"net.ipv4.tcp_rmem", "1 1 1"},
		{"net.ipv4.tcp_rmem", "1 131072 6291456"},
		{"net.ipv4.tcp_rmem", "4095 4096 4096"},
		{"net.ipv4.tcp_rmem", "4096 4096 4096"},
		{"net.ipv4.tcp_rmem", "4096 131072 33554432"},
		{"net.ipv4.tcp_wmem", "1 1 1"},
		{"net.ipv4.tcp_wmem", "0 1 1"},
	}
	defaults := map[string]string{"net.ipv4.ip_unprivileged_port_start": "1024", "net.ipv4.ip_local_port_range": "32768 60999"}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			values := map[string]string{}
			for k, v := range defaults {
				values[k] = v
			}
			values[tt.key] = tt.value
			ours := ValidateValueOn(tt.key, tt.value, release)
			if ours == nil {
				ours = CheckPairs(values)
			}
			out, err := exec.Command("unshare", "-n", "sh", "-c", `printf '%s\n' "$2" > "$1" 2>/dev/null && echo taken || echo refused`, "sh", ProcPath(tt.key), tt.value).CombinedOutput()
			if err != nil {
				t.Fatalf("unshare -n: %v: %s", err, out)
			}
			kernel := strings.TrimSpace(string(out))
			if (ours == nil) != (kernel == "taken") {
				t.Errorf("relayctl says %v for kernel %s, the kernel %s it", ours, release, kernel)
			}
		})
	}
}

// Every known numeric key's example is itself valid, so no error message
// suggests a value that would be refused.
func TestKnownExamplesAreValid(t *testing.T) {
	for _, k := range KnownKeys() {
		info, _ := Lookup(k)
		if info.Fields == 0 {
			continue
		}
		if err := ValidateValue(k, info.Example); err != nil {
			t.Errorf("%s: example %q: %v", k, info.Example, err)
		}
	}
}

// Package tune holds the kernel rules relayctl plans with: sysctl keys and
// values, the receive-buffer rule, sysctl.d precedence and buffer sizing.
//
// It is pure: no SSH, no clock, no filesystem. Facts come in as arguments
// and answers go out as values, so every rule is tested exhaustively.
package tune

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// MaxKeyLen is the longest sysctl key ValidKey accepts.
const MaxKeyLen = 128

// MaxValueLen is the longest free-text value ValidateValue accepts.
const MaxValueLen = 256

const keyHelp = "a valid key is two or more dot-separated segments of letters, digits, '_' and '-', " +
	"none empty or starting with '-', at most 128 characters, like net.core.rmem_max"

// ValidKey reports whether key is a plain dotted sysctl name. Keys end up in
// a /proc/sys path and in a file on the host, so anything that could walk a
// path ("../", "/"), glob or reach a shell is refused.
func ValidKey(key string) error {
	if key == "" {
		return fmt.Errorf("sysctl key is empty: %s", keyHelp)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("sysctl key %.40q... is %d characters long: %s", key, len(key), keyHelp)
	}
	segs := strings.Split(key, ".")
	if len(segs) < 2 {
		return fmt.Errorf("sysctl key %q has one segment: %s", key, keyHelp)
	}
	for _, s := range segs {
		if s == "" {
			return fmt.Errorf("sysctl key %q has an empty segment: %s", key, keyHelp)
		}
		if s[0] == '-' {
			return fmt.Errorf("sysctl key %q has a segment starting with '-': %s", key, keyHelp)
		}
		for _, r := range s {
			if !isKeyChar(r) {
				return fmt.Errorf("sysctl key %q contains %q: %s", key, r, keyHelp)
			}
		}
	}
	return nil
}

func isKeyChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// ProcPath returns the file under /proc/sys that holds key, for a key that
// passed ValidKey: net.core.rmem_max is /proc/sys/net/core/rmem_max.
func ProcPath(key string) string {
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

// Normalize trims v and collapses every run of whitespace (spaces, tabs,
// newlines) to one space. Multi-value keys such as net.ipv4.udp_mem read back
// tab-separated from /proc/sys (docs/kernel.md), so values are compared and
// written in this form.
func Normalize(v string) string {
	return strings.Join(strings.Fields(v), " ")
}

// Equal reports whether two sysctl values are the same after Normalize, so
// "4096 131072 6291456" equals the kernel's "4096\t131072\t6291456" and a
// rerun reports no change (ansible#2004).
func Equal(a, b string) bool {
	return Normalize(a) == Normalize(b)
}

// KeyInfo is what relayctl knows about a sysctl key.
type KeyInfo struct {
	// Fields is the number of integers the value holds; 0 means free text.
	Fields int
	// Global means one value for the whole machine: a child network
	// namespace cannot change it (the file is read-only or absent there).
	Global bool
	// AbsentInNetns means the key does not exist at all under /proc/sys
	// inside a child network namespace, so reading it there fails.
	AbsentInNetns bool
	// Unit names what the integers count, for messages ("bytes", "pages").
	Unit string
	// Min and Max bound each integer as the kernel accepts it; a write out of
	// range fails with EINVAL (and procps sysctl may still exit 0).
	Min, Max int64
	// Doc is one line for reviews.
	Doc string
	// Example is a valid value, for error messages.
	Example string
	// Range: the two integers are a range's first and last, and the
	// kernel refuses a first above the last (EINVAL).
	Range bool
	// Ordered: the integers are documented as a rising triple (min,
	// default, max; no pressure, pressure, hard limit). The kernel takes
	// them in any order, but one out of order is never what was meant:
	// a default above the max, a limit below the pressure.
	Ordered bool
	// BuildMins are higher floors than Min that some kernel builds hold
	// each integer to. A spec is valid only if every kernel relayctl knows
	// takes it, so ValidateValue holds a value to the highest of them;
	// MinFor says what one kernel takes.
	BuildMins []BuildMin
}

// BuildMin is a floor a key's integers have on some kernels and not on
// others: the kernel's own table gives the key a higher minimum there
// (proc_dointvec_minmax's extra1), and a write below it fails with EINVAL.
type BuildMin struct {
	Min int64
	// Release is the start of the kernel release (uname -r) of the
	// kernels that hold it.
	Release string
	// Kernels says which kernels, in words, for messages and docs.
	Kernels string
}

// holds says the floor is one kernel release's.
func (b BuildMin) holds(release string) bool { return strings.HasPrefix(release, b.Release) }

// The kernel's sock.h minimums: SOCK_MIN_RCVBUF is 2304 and SOCK_MIN_SNDBUF
// twice that. Verified on kernel 6.18: writing 2303 to rmem_max or
// rmem_default and 4607 to wmem_max or wmem_default fails, one more succeeds.
const (
	minRcvbuf = 2304
	minSndbuf = 4608
	intMax    = math.MaxInt32
)

// known is the table of keys relayctl understands. Every Global and
// AbsentInNetns claim was verified on kernel 6.18 (6.18.44) with
// `unshare -n sh -c 'ls -l /proc/sys/net/...'`: net.core.{r,w}mem_{max,default}
// are mode 0444 in a child netns (and a write as root is refused);
// net.core.netdev_max_backlog and net.ipv4.udp_mem do not exist there at all;
// somaxconn, optmem_max, udp_{r,w}mem_min and tcp_{r,w}mem are 0644 there and a
// write inside does not change the value outside.
var known = map[string]KeyInfo{
	"net.core.rmem_max": {Fields: 1, Global: true, Unit: "bytes", Min: minRcvbuf, Max: intMax,
		Doc: "the largest SO_RCVBUF a socket may request; the kernel silently caps larger requests", Example: "8388608"},
	"net.core.rmem_default": {Fields: 1, Global: true, Unit: "bytes", Min: minRcvbuf, Max: intMax,
		Doc: "the receive buffer of a socket that never calls setsockopt(SO_RCVBUF)", Example: "212992"},
	"net.core.wmem_max": {Fields: 1, Global: true, Unit: "bytes", Min: minSndbuf, Max: intMax,
		Doc: "the largest SO_SNDBUF a socket may request", Example: "8388608"},
	"net.core.wmem_default": {Fields: 1, Global: true, Unit: "bytes", Min: minSndbuf, Max: intMax,
		Doc: "the send buffer of a socket that never calls setsockopt(SO_SNDBUF)", Example: "212992"},
	"net.core.netdev_max_backlog": {Fields: 1, Global: true, AbsentInNetns: true, Unit: "packets", Max: intMax,
		Doc: "packets queued per CPU between the NIC and the protocol stack", Example: "5000"},
	"net.core.somaxconn": {Fields: 1, Unit: "connections", Max: intMax,
		Doc: "the longest TCP listen backlog", Example: "4096"},
	"net.core.optmem_max": {Fields: 1, Unit: "bytes", Max: intMax,
		Doc: "ancillary buffer per socket (control messages such as SO_RXQ_OVFL)", Example: "131072"},
	"net.ipv4.udp_rmem_min": {Fields: 1, Unit: "bytes", Max: intMax,
		Doc: "receive buffer every UDP socket may use even under udp_mem pressure", Example: "4096"},
	"net.ipv4.udp_wmem_min": {Fields: 1, Unit: "bytes", Max: intMax,
		Doc: "send buffer every UDP socket may use even under udp_mem pressure", Example: "4096"},
	"net.ipv4.udp_mem": {Fields: 3, Global: true, AbsentInNetns: true, Unit: "pages", Max: math.MaxInt64, Ordered: true,
		Doc: "UDP memory for the whole machine in pages: no pressure, pressure, hard limit", Example: "764688 1019584 1529376"},
	"net.ipv4.tcp_rmem": {Fields: 3, Unit: "bytes", Min: 1, Max: intMax, Ordered: true, BuildMins: tcpRmemFloors,
		Doc: "TCP receive buffer: min, default, max", Example: "4096 131072 6291456"},
	"net.ipv4.tcp_wmem": {Fields: 3, Unit: "bytes", Min: 1, Max: intMax, Ordered: true,
		Doc: "TCP send buffer: min, default, max", Example: "4096 16384 4194304"},
	"net.ipv4.ip_local_port_range": {Fields: 2, Unit: "ports", Min: 1, Max: 65535, Range: true,
		Doc: "the local ports TCP and UDP choose from: first, last; the first at or above net.ipv4.ip_unprivileged_port_start", Example: "32768 60999"},
	"net.ipv4.ip_unprivileged_port_start": {Fields: 1, Unit: "port", Max: 65535,
		Doc: "the first port a process without CAP_NET_BIND_SERVICE may bind; at most net.ipv4.ip_local_port_range's first", Example: "1024"},
	"net.ipv4.ping_group_range": {Fields: 2, Unit: "group ids", Max: intMax,
		Doc: "the groups that may open ICMP echo sockets: first, last (the default 1 0, first above last, is nobody)", Example: "0 2147483647"},
}

// tcpRmemFloors: upstream Linux bounds each of tcp_rmem's integers below
// by 1 (net/ipv4/sysctl_net_ipv4.c: proc_dointvec_minmax, extra1 =
// SYSCTL_ONE, through the 6.19 sources), and so does every kernel that
// does not say otherwise here. The 6.18.44 "-fc" builds this project's
// machines run refuse anything below 4096 in any of the three (EINVAL;
// probed in a fresh network namespace: 4095 4096 4096 and 4096 4096 4095
// refused, 4096 4096 4096 taken), while their tcp_wmem still takes 1 1 1:
// docs/kernel.md.
var tcpRmemFloors = []BuildMin{
	{Min: 4096, Release: "6.18.44-fc-", Kernels: "Linux 6.18.44-fc"},
}

// Lookup returns what relayctl knows about key.
func Lookup(key string) (KeyInfo, bool) {
	info, ok := known[key]
	return info, ok
}

// KnownKeys returns the keys Lookup knows, sorted.
func KnownKeys() []string {
	keys := make([]string, 0, len(known))
	for k := range known {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var fieldWords = []string{"", "one integer", "two integers", "three integers"}

// ValidateValue checks value for key. A known numeric key takes exactly
// Fields integers in the kernel's range, separated by whitespace; any other
// key takes printable text of at most MaxValueLen bytes, with no newline or
// control character (it becomes one line of a sysctl.d file). An error says
// what a valid value looks like: a size with a suffix ("8M") is worked out
// in bytes, otherwise the key's example.
func ValidateValue(key, value string) error {
	return validateValue(key, value, func(BuildMin) bool { return !floorsForgotten.Load() })
}

// floorsForgotten: see ForgetBuildFloors.
var floorsForgotten atomic.Bool

// ForgetBuildFloors makes ValidateValue take what upstream kernels take,
// as a relayctl that does not know a kernel build's floor would, until
// restore is called. It exists for the lab test that proves what a host
// does when the kernel refuses a value relayctl let through: the window's
// write is read back and refused, and nothing else happens.
func ForgetBuildFloors() (restore func()) {
	floorsForgotten.Store(true)
	return func() { floorsForgotten.Store(false) }
}

// ValidateValueOn checks value for key as the kernel whose release (uname
// -r) is given does: only the floors that kernel holds (BuildMins). It is
// what that kernel takes, which may be more than ValidateValue accepts.
func ValidateValueOn(key, value, release string) error {
	return validateValue(key, value, func(b BuildMin) bool { return b.holds(release) })
}

// MinFor is the least each of key's integers may be on the kernel whose
// release is given.
func MinFor(key, release string) int64 {
	info := known[key]
	floor := info.Min
	for _, b := range info.BuildMins {
		if b.holds(release) {
			floor = max(floor, b.Min)
		}
	}
	return floor
}

// validateValue is ValidateValue with the build floors that apply.
func validateValue(key, value string, applies func(BuildMin) bool) error {
	info, ok := known[key]
	if !ok || info.Fields == 0 {
		return validText(key, value)
	}
	want := fmt.Sprintf("%d integers", info.Fields)
	if info.Fields < len(fieldWords) {
		want = fieldWords[info.Fields]
	}
	want = fmt.Sprintf("%s wants %s (%s)", key, want, info.Unit)
	fields := strings.Fields(value)
	if len(fields) != info.Fields {
		return fmt.Errorf("%s, got %q; %s", want, value, info.example(value))
	}
	nums := make([]int64, len(fields))
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return fmt.Errorf("%s, got %q; %s", want, value, info.example(value))
		}
		if n < info.Min || n > info.Max {
			return fmt.Errorf("%s, each from %d to %d, got %q; %s", want, info.Min, info.Max, value, info.example(value))
		}
		nums[i] = n
	}
	if err := info.buildFloor(key, value, nums, applies); err != nil {
		return err
	}
	return info.order(key, nums)
}

// buildFloor checks integers against the highest floor of the kernel
// builds that apply, naming the kernels.
func (info KeyInfo) buildFloor(key, value string, nums []int64, applies func(BuildMin) bool) error {
	for _, b := range info.BuildMins {
		if !applies(b) {
			continue
		}
		for _, n := range nums {
			if n < b.Min {
				return fmt.Errorf("%s wants each integer at least %d: %s refuses less (EINVAL), though other kernels take %d; got %q; e.g. %s", key, b.Min, b.Kernels, info.Min, value, info.Example)
			}
		}
	}
	return nil
}

// order checks a range's first against its last (the kernel refuses one
// above it) and a documented rising triple's order.
func (info KeyInfo) order(key string, n []int64) error {
	switch {
	case info.Range && n[0] > n[1]:
		return fmt.Errorf("%s is a range, first then last, and the kernel refuses a first above the last (EINVAL): got %d %d; write %d %d", key, n[0], n[1], n[1], n[0])
	case info.Ordered && (n[0] > n[1] || n[1] > n[2]):
		return fmt.Errorf("%s is %s, each at least the one before: got %d %d %d, out of order (the kernel takes it, and %s); e.g. %s", key, strings.ToLower(strings.SplitN(info.Doc, ": ", 2)[1]), n[0], n[1], n[2], outOfOrder(key), info.Example)
	}
	return nil
}

// outOfOrder says what an out-of-order triple does.
func outOfOrder(key string) string {
	if strings.HasSuffix(key, "_mem") {
		return "memory pressure would begin above the hard limit"
	}
	return "new sockets would start outside the bounds they may grow and shrink in"
}

// Pairs are sysctls whose values the kernel checks against each other, the
// second against the first: a port range must start at or above the first
// unprivileged port (else EINVAL, whichever of the two is written).
var pairs = []struct{ low, high string }{
	{"net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_port_range"},
}

// Related are the keys whose values the kernel checks key's against: a
// plan reads them too, so it can say what the kernel will refuse.
func Related(key string) []string {
	var out []string
	for _, p := range pairs {
		switch key {
		case p.low:
			out = append(out, p.high)
		case p.high:
			out = append(out, p.low)
		}
	}
	return out
}

// CheckPairs checks values (each key's value in force once a plan is
// applied: the planned one, else the host's) against each other, as the
// kernel will: an error names both keys and what to write.
func CheckPairs(values map[string]string) error {
	for _, p := range pairs {
		lo, okLo := values[p.low]
		hi, okHi := values[p.high]
		if !okLo || !okHi {
			continue
		}
		start, err1 := strconv.ParseInt(Normalize(lo), 10, 64)
		first, err2 := strconv.ParseInt(strings.Fields(Normalize(hi) + " x")[0], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if first < start {
			return fmt.Errorf("%s starts at %d, below %s %d, and the kernel refuses that (EINVAL): start the range at %d or above, or lower %s", p.high, first, p.low, start, start, p.low)
		}
	}
	return nil
}

// sizeSuffix is a byte size written the way people say it: 8M, 4MiB, 512k.
var sizeSuffix = lazyre.New(`^(\d{1,7})\s*([kKmMgG])(?:i?[bB])?$`)

// example is "e.g. 8388608": for a size with a suffix ("8M") that size in
// bytes, else the key's Example.
func (info KeyInfo) example(got string) string {
	if m := sizeSuffix.FindStringSubmatch(strings.TrimSpace(got)); m != nil && info.Unit == "bytes" && info.Fields == 1 {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		unit := strings.ToUpper(m[2])
		shift := map[string]uint{"K": 10, "M": 20, "G": 30}[unit]
		if b := n << shift; b >= info.Min && b <= info.Max {
			return fmt.Sprintf("e.g. %d, which is %d %siB in bytes", b, n, unit)
		}
	}
	return "e.g. " + info.Example
}

func validText(key, value string) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("%s wants a value of at most %d characters, got %d", key, MaxValueLen, len(value))
	}
	if strings.TrimSpace(value) == "" {
		return fmt.Errorf("%s wants a non-empty value", key)
	}
	for _, r := range value {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) && r != '\t' {
			return fmt.Errorf("%s wants printable text on one line, got %q", key, value)
		}
	}
	return nil
}

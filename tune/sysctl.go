// Package tune holds the kernel rules relayctl plans with: sysctl keys and
// values, the receive-buffer rule, sysctl.d precedence and buffer sizing.
//
// It is pure: no SSH, no clock, no filesystem. Facts come in as arguments
// and answers go out as values, so every rule is tested exhaustively.
package tune

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
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
}

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
	"net.ipv4.udp_mem": {Fields: 3, Global: true, AbsentInNetns: true, Unit: "pages", Max: math.MaxInt64,
		Doc: "UDP memory for the whole machine in pages: no pressure, pressure, hard limit", Example: "764688 1019584 1529376"},
	"net.ipv4.tcp_rmem": {Fields: 3, Unit: "bytes", Max: intMax,
		Doc: "TCP receive buffer: min, default, max", Example: "4096 131072 6291456"},
	"net.ipv4.tcp_wmem": {Fields: 3, Unit: "bytes", Max: intMax,
		Doc: "TCP send buffer: min, default, max", Example: "4096 16384 4194304"},
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
	for _, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return fmt.Errorf("%s, got %q; %s", want, value, info.example(value))
		}
		if n < info.Min || n > info.Max {
			return fmt.Errorf("%s, each from %d to %d, got %q; %s", want, info.Min, info.Max, value, info.example(value))
		}
	}
	return nil
}

// sizeSuffix is a byte size written the way people say it: 8M, 4MiB, 512k.
var sizeSuffix = regexp.MustCompile(`^(\d{1,7})\s*([kKmMgG])(?:i?[bB])?$`)

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

package sockstat

import (
	"fmt"
	"strconv"
	"strings"
)

// UDPStats are the Udp counters of /proc/net/snmp, for the network namespace
// the file was read in (/proc/PID/net/snmp for a relay in its own).
// RcvbufErrors moves with every receive-buffer drop, and InErrors with it
// (docs/kernel.md).
type UDPStats struct {
	InDatagrams, NoPorts, InErrors, OutDatagrams uint64
	RcvbufErrors, SndbufErrors, InCsumErrors     uint64
	IgnoredMulti, MemErrors                      uint64
	Columns                                      map[string]uint64 // every Udp column by name, including ones newer kernels add
}

// required are the columns without which the drop evidence is incomplete.
var required = []string{"InDatagrams", "InErrors", "RcvbufErrors"}

// ParseSNMP reads the "Udp:" header and value lines of /proc/net/snmp and
// pairs them by column name, not position. It is an error if either line is
// missing, repeated, or the two differ in length.
func ParseSNMP(content []byte) (UDPStats, error) {
	var hdr, val []string
	hdrLine, valLine := 0, 0
	for i, l := range strings.Split(string(content), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		switch {
		case hdr == nil:
			hdr, hdrLine = f[1:], i+1
		case val == nil:
			val, valLine = f[1:], i+1
		default:
			return UDPStats{}, fmt.Errorf("parse snmp line %d: a third Udp: line", i+1)
		}
	}
	if hdr == nil || val == nil {
		return UDPStats{}, fmt.Errorf("parse snmp: want a Udp: header line and a Udp: value line, found %d", btoi(hdr != nil)+btoi(val != nil))
	}
	if len(hdr) != len(val) {
		return UDPStats{}, fmt.Errorf("parse snmp lines %d and %d: %d Udp column names but %d values", hdrLine, valLine, len(hdr), len(val))
	}
	st := UDPStats{Columns: make(map[string]uint64, len(hdr))}
	for i, name := range hdr {
		if _, err := strconv.ParseUint(name, 10, 64); err == nil {
			return UDPStats{}, fmt.Errorf("parse snmp line %d: column name %q is a number: the header line is missing", hdrLine, name)
		}
		if _, dup := st.Columns[name]; dup {
			return UDPStats{}, fmt.Errorf("parse snmp line %d: column %s twice", hdrLine, clip(name))
		}
		v, err := strconv.ParseUint(val[i], 10, 64)
		if err != nil {
			return UDPStats{}, fmt.Errorf("parse snmp line %d: Udp %s value %q is not a counter", valLine, clip(name), clip(val[i]))
		}
		st.Columns[name] = v
	}
	for _, name := range required {
		if _, ok := st.Columns[name]; !ok {
			return UDPStats{}, fmt.Errorf("parse snmp line %d: no Udp column %s", hdrLine, name)
		}
	}
	c := st.Columns
	st.InDatagrams, st.NoPorts, st.InErrors, st.OutDatagrams = c["InDatagrams"], c["NoPorts"], c["InErrors"], c["OutDatagrams"]
	st.RcvbufErrors, st.SndbufErrors, st.InCsumErrors = c["RcvbufErrors"], c["SndbufErrors"], c["InCsumErrors"]
	st.IgnoredMulti, st.MemErrors = c["IgnoredMulti"], c["MemErrors"]
	return st, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

package agent

import (
	"fmt"
	"regexp"
	"testing"
)

// udpTableHasPort finds a socket where observe.sh's grep did:
// grep -q "^ *[0-9]*: [0-9A-F]*:$hex " (the local address's port).
func FuzzUDPTableHasPort(f *testing.F) {
	f.Add([]byte("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"+
		" 1234: 0100007F:1E6C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 555 2 0000000000000000 0\n"), uint16(7788))
	f.Add([]byte("   12: 00000000000000000000000000000000:1E6C 00000000000000000000000000000000:0000 07\n"), uint16(7788))
	f.Add([]byte(" 1: 0100007F:0050 0100007F:1E6C 01\n"), uint16(7788))
	f.Add([]byte("1: 0100007F:1E6C"), uint16(7788))
	f.Add([]byte("x 1: 0100007F:1E6C \n"), uint16(7788))
	f.Fuzz(func(t *testing.T, table []byte, port uint16) {
		grep := regexp.MustCompile(fmt.Sprintf(`(?m)^ *[0-9]*: [0-9A-F]*:%04X `, port))
		if got, want := udpTableHasPort(table, int(port)), grep.Match(table); got != want {
			t.Errorf("port %d in %q: got %v, grep says %v", port, table, got, want)
		}
	})
}

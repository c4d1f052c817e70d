package server

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/sockstat"
)

var (
	drainCaller = netip.MustParseAddrPort("127.0.0.1:40000")
	drainRelay  = netip.MustParseAddrPort("127.0.0.1:7789")
)

// callerRefused lets only a live socket of root's or relayd's own user
// change the relay: never one it cannot find, and never a socket no
// process holds, whatever its uid (a timewait entry's is 0).
func TestCallerRefused(t *testing.T) {
	const relaydUID = 998
	tests := []struct {
		name    string
		sock    sockstat.TCPSock
		found   bool
		wantErr string // "" when the caller may
	}{
		{"root, established", sockstat.TCPSock{State: sockstat.TCPEstablished, UID: 0, Inode: 7}, true, ""},
		{"relayd's user, established", sockstat.TCPSock{State: sockstat.TCPEstablished, UID: relaydUID, Inode: 7}, true, ""},
		{"another user, established", sockstat.TCPSock{State: sockstat.TCPEstablished, UID: 65534, Inode: 7}, true, "the caller is uid 65534; only root and relayd's own user (uid 998)"},
		{"no such socket", sockstat.TCPSock{}, false, "cannot tell who calls: no socket 127.0.0.1:40000 to 127.0.0.1:7789 (sock_diag)"},
		{"timewait entry (uid 0, no inode)", sockstat.TCPSock{State: sockstat.TCPFinWait2, UID: 0, Inode: 0}, true, "is FIN_WAIT2 with inode 0, not an established one"},
		{"orphan closing (no inode)", sockstat.TCPSock{State: sockstat.TCPFinWait1, UID: 0, Inode: 0}, true, "is FIN_WAIT1 with inode 0"},
		{"established without an inode", sockstat.TCPSock{State: sockstat.TCPEstablished, UID: 0, Inode: 0}, true, "is ESTABLISHED with inode 0"},
		{"root, half-closed", sockstat.TCPSock{State: sockstat.TCPFinWait2, UID: 0, Inode: 7}, true, "is FIN_WAIT2 with inode 7"},
		{"root, listening", sockstat.TCPSock{State: sockstat.TCPListen, UID: 0, Inode: 7}, true, "is LISTEN with inode 7"},
	}
	for _, tt := range tests {
		got := callerRefused(tt.sock, tt.found, "sock_diag", drainCaller, drainRelay, relaydUID)
		if tt.wantErr == "" && got != "" || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.wantErr)
		}
	}
}

// callerLeft: right before relayd acts, the caller's socket must be the
// same live one it was.
func TestCallerLeft(t *testing.T) {
	was := sockstat.TCPSock{State: sockstat.TCPEstablished, UID: 0, Inode: 7}
	tests := []struct {
		name    string
		now     sockstat.TCPSock
		found   bool
		wantErr string
	}{
		{"still there", was, true, ""},
		{"gone", sockstat.TCPSock{}, false, "is gone"},
		{"closing", sockstat.TCPSock{State: sockstat.TCPFinWait1, UID: 0, Inode: 0}, true, "is now FIN_WAIT1 with inode 0"},
		{"a timewait entry", sockstat.TCPSock{State: sockstat.TCPFinWait2, UID: 0, Inode: 0}, true, "is now FIN_WAIT2"},
		{"another socket", sockstat.TCPSock{State: sockstat.TCPEstablished, UID: 0, Inode: 8}, true, "changed (inode 8 uid 0, was inode 7 uid 0)"},
		{"another owner", sockstat.TCPSock{State: sockstat.TCPEstablished, UID: 65534, Inode: 7}, true, "changed (inode 7 uid 65534"},
	}
	for _, tt := range tests {
		got := callerLeft(was, tt.now, tt.found, drainCaller, drainRelay)
		if tt.wantErr == "" && got != "" || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.wantErr)
		}
	}
}

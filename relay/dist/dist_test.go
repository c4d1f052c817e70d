package dist_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/dist"
	"github.com/relayctl/relayctl/relay/fdstore"
)

// settings returns the KEY=VALUE lines of a unit file, in order.
func settings(unit []byte) map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		m[k] = append(m[k], v)
	}
	return m
}

// TestUnitAgreesWithRelayd checks the unit against what relayd does: the
// file it reads, the notify protocol it speaks, the exit status of a bad
// config.
func TestUnitAgreesWithRelayd(t *testing.T) {
	s := settings(dist.Unit)
	tests := []struct{ key, want string }{
		{"Type", "notify"},
		{"RuntimeDirectory", "relayd"},
		{"SyslogIdentifier", "relayd"},
		{"RestartPreventExitStatus", "2"}, // cmd/relayd: 2 on bad flags or configuration
		{"DynamicUser", "yes"},
		{"CapabilityBoundingSet", ""},
		{"AmbientCapabilities", ""},
	}
	for _, tt := range tests {
		if got := s[tt.key]; len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s: got %q, want %q", tt.key, got, tt.want)
		}
	}
	// The config: systemd (root) opens config.DefaultPath as the standard
	// input, and the relay's own user copies it into the runtime folder
	// relayd reads, at each start and on each reload, so it may be 0600
	// root's while root never writes in a folder of the relay's user.
	if got := s["StandardInput"]; len(got) != 1 || got[0] != "file:"+config.DefaultPath {
		t.Errorf("StandardInput %q, want file:%s", got, config.DefaultPath)
	}
	const copyConfig = "/bin/sh -c 'rm -f /run/relayd/relayd.env.new && cat >/run/relayd/relayd.env.new && mv -f /run/relayd/relayd.env.new /run/relayd/relayd.env && "
	for _, k := range []string{"ExecStart", "ExecReload"} {
		if got := s[k]; len(got) != 1 || !strings.HasPrefix(got[0], copyConfig) {
			t.Errorf("%s: %q, want the relay user's copy of its standard input into /run/relayd", k, got)
		}
	}
	if got := s["ExecStart"]; len(got) != 1 || !strings.HasSuffix(got[0], "&& exec /opt/relay/current/relayd --config /run/relayd/relayd.env </dev/null'") {
		t.Errorf("ExecStart %q, want the copy, then relayd reading it, its standard input closed", got)
	}
	// The copy in its own sandboxed process would lengthen a restart's gap.
	if got := s["ExecStartPre"]; len(got) != 0 {
		t.Errorf("ExecStartPre %q: the start's copy belongs in ExecStart's shell", got)
	}
	if got := s["ExecReload"]; len(got) != 1 || !strings.HasSuffix(got[0], "&& kill -HUP $MAINPID'") {
		t.Errorf("ExecReload %q, want the copy then SIGHUP", got)
	}
	// The fd store: big enough for what relayd keeps there, its size told
	// to relayd as systemd 254 would, and never the 254-only key that 252
	// warns about.
	max := s["FileDescriptorStoreMax"]
	if len(max) != 1 {
		t.Fatalf("FileDescriptorStoreMax: %q, want one", max)
	}
	if n, err := strconv.Atoi(max[0]); err != nil || n < fdstore.MinStoreMax {
		t.Errorf("FileDescriptorStoreMax=%s, want at least %d", max[0], fdstore.MinStoreMax)
	}
	if env := s["Environment"]; !slices.Contains(env, fdstore.EnvMax+"="+max[0]) {
		t.Errorf("Environment %q, want %s=%s (the same as FileDescriptorStoreMax=)", env, fdstore.EnvMax, max[0])
	}
	if got := s["NotifyAccess"]; len(got) != 1 || got[0] != "main" {
		t.Errorf("NotifyAccess %q, want main: relayd itself stores its descriptors", got)
	}
	if _, ok := s["FileDescriptorStorePreserve"]; ok {
		t.Error("FileDescriptorStorePreserve= in the unit: systemd 252 warns about it; it belongs in drop-ins/fdstore-preserve.conf")
	}
	// sd_notify is a unix datagram: without AF_UNIX, READY=1 never arrives.
	// /drain asks sock_diag who calls: without AF_NETLINK relayd falls back
	// to reading /proc/net/tcp.
	if fams := strings.Fields(strings.Join(s["RestrictAddressFamilies"], " ")); !slices.Contains(fams, "AF_UNIX") || !slices.Contains(fams, "AF_INET") || !slices.Contains(fams, "AF_NETLINK") {
		t.Errorf("RestrictAddressFamilies %q, want AF_INET, AF_UNIX and AF_NETLINK", fams)
	}
}

// TestNoCommandRunsAsRoot: every command of the unit and its drop-ins runs
// as the relay's dynamic user, in its sandbox. A + or ! prefix (or
// PermissionsStartOnly=, User=root) would run it as root, and root acting
// in the runtime folder the relay's user owns is what a planted symlink
// turns against root's own files.
func TestNoCommandRunsAsRoot(t *testing.T) {
	files := map[string][]byte{dist.UnitName: dist.Unit, dist.NetnsDropInPath: dist.NetnsDropIn,
		dist.ForceDropInPath: dist.ForceDropIn, dist.PreserveDropInPath: dist.PreserveDropIn}
	for name, body := range files {
		for k, vs := range settings(body) {
			for _, v := range vs {
				// systemd's prefixes come in any order before the path.
				prefix := v[:len(v)-len(strings.TrimLeft(v, "@-:+!"))]
				if strings.HasPrefix(k, "Exec") && strings.ContainsAny(prefix, "+!") {
					t.Errorf("%s: %s=%s runs with full privileges", name, k, v)
				}
				if k == "PermissionsStartOnly" || k == "User" && v == "root" {
					t.Errorf("%s: %s=%s runs commands as root", name, k, v)
				}
			}
		}
	}
}

func TestDropIns(t *testing.T) {
	f := settings(dist.ForceDropIn)
	for _, k := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if got := f[k]; len(got) != 1 || got[0] != "CAP_NET_ADMIN" {
			t.Errorf("force drop-in %s: got %q, want CAP_NET_ADMIN", k, got)
		}
	}
	n := settings(dist.NetnsDropIn)
	if got := n["NetworkNamespacePath"]; len(got) != 1 || got[0] != "/run/netns/relay" {
		t.Errorf("netns drop-in NetworkNamespacePath: %q, want /run/netns/relay", got)
	}
	for _, k := range []string{"Requires", "After"} {
		if got := n[k]; len(got) != 1 || got[0] != dist.NetnsUnitName {
			t.Errorf("netns drop-in %s: %q, want %s", k, got, dist.NetnsUnitName)
		}
	}
	if got := settings(dist.PreserveDropIn)["FileDescriptorStorePreserve"]; len(got) != 1 || got[0] != "yes" {
		t.Errorf("fdstore-preserve drop-in: %q, want FileDescriptorStorePreserve=yes", got)
	}
	if !slices.Contains(settings(dist.NetnsUnit)["ExecStart"], "/sbin/ip netns add relay") {
		t.Errorf("relay-netns.service does not make /run/netns/relay")
	}
}

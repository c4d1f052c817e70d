package tune

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// applyScript runs `sysctl --system` over staged files in a private mount
// namespace (tmpfs over every sysctl.d directory, the staged sysctl.conf
// bound over /etc/sysctl.conf) and a fresh network namespace, so only
// per-namespace values of a throwaway namespace change. It prints each key's
// value before and after.
const applyScript = `set -e
stage=$1; shift
for d in /etc/sysctl.d /usr/lib/sysctl.d; do
	[ -d "$d" ] || { echo "missing $d" >&2; exit 3; }
	mount -t tmpfs relayctl-test "$d"
done
for d in /run/sysctl.d /usr/local/lib/sysctl.d; do
	if [ -d "$d" ]; then mount -t tmpfs relayctl-test "$d"; else mount -t tmpfs relayctl-test "${d%/*}"; mkdir "$d"; fi
done
if [ ! -L /lib ] && [ -d /lib/sysctl.d ]; then mount -t tmpfs relayctl-test /lib/sysctl.d; fi
[ -e /etc/sysctl.conf ] || { echo "missing /etc/sysctl.conf" >&2; exit 3; }
mount --bind "$stage/sysctl.conf" /etc/sysctl.conf
for d in /etc/sysctl.d /run/sysctl.d /usr/local/lib/sysctl.d /usr/lib/sysctl.d; do
	if [ -d "$stage$d" ]; then cp "$stage$d"/* "$d"/; fi
done
for k in "$@"; do printf 'before %s %s\n' "$k" "$(tr '\t' ' ' < "/proc/sys/$(echo "$k" | tr . /)")"; done
sysctl --system >/dev/null 2>&1 || true
for k in "$@"; do printf 'after %s %s\n' "$k" "$(tr '\t' ' ' < "/proc/sys/$(echo "$k" | tr . /)")"; done
`

// TestDecideMatchesSysctlSystem checks Decides against what procps's
// `sysctl --system` really leaves in /proc/sys.
func TestDecideMatchesSysctlSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root for mount and network namespaces (the lab runs every test as root)")
	}
	if _, err := exec.LookPath("sysctl"); err != nil {
		t.Fatalf("sysctl (procps) is needed: %v", err)
	}
	keys := []string{
		"net.core.somaxconn", "net.core.optmem_max", "net.ipv4.udp_rmem_min", "net.ipv4.udp_wmem_min",
		"net.ipv4.tcp_rmem", "net.ipv4.conf.lo.rp_filter", "net.ipv4.conf.all.rp_filter",
		"net.ipv4.conf.default.rp_filter", "net.ipv4.conf.lo.accept_local", "net.ipv4.conf.all.accept_local",
	}
	scenarios := []struct {
		name  string
		files []ConfFile
	}{
		{"order across directories and masks", files(
			"/etc/sysctl.d/05-c.conf", "net.core.somaxconn = 333\n",
			"/usr/lib/sysctl.d/20-b.conf", "net.core.somaxconn = 222\nnet.core.optmem_max = 30000\n",
			"/run/sysctl.d/10-a.conf", "net.core.somaxconn = 111\n",
			"/etc/sysctl.d/20-b.conf", "net.ipv4.udp_wmem_min = 8192\n",
			"/usr/local/lib/sysctl.d/15-x.conf", "net.ipv4.udp_rmem_min = 12288\n",
			"/usr/lib/sysctl.d/15-x.conf", "net.ipv4.udp_rmem_min = 16384\n",
		)},
		{"sysctl.conf last, slashes, ignore-errors, tabs", files(
			"/etc/sysctl.conf", "net.core.optmem_max = 20480\n",
			"/etc/sysctl.d/99-z.conf", "net.core.optmem_max = 40960\n-net.core.nonexistent = 1\nnet/ipv4/udp_rmem_min = 8192\n",
			"/usr/lib/sysctl.d/50-tcp.conf", "net.ipv4.tcp_rmem = 4096\t65536\t1048576\n",
		)},
		{"globs and explicit keys", files(
			"/etc/sysctl.d/10-a.conf", "net.ipv4.conf.lo.rp_filter = 1\nnet.ipv4.conf.*.accept_local = 1\n",
			"/usr/lib/sysctl.d/20-b.conf", "net.ipv4.conf.*.rp_filter = 2\nnet.ipv4.conf.l?.accept_local = 0\nnet.*udp_rmem_min = 9999\n",
			"/etc/sysctl.conf", "net.ipv4.conf.all.rp_filter = 0\n",
		)},
		{"our drop-in shadowed by a vendor file", files(
			"/etc/sysctl.d/90-relayctl.conf", "net.core.somaxconn = 8192\nnet.ipv4.udp_rmem_min = 8192\n",
			"/usr/lib/sysctl.d/99-vendor.conf", "net.core.somaxconn = 1024\n",
		)},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			stage := t.TempDir()
			conf := []byte{}
			for _, f := range sc.files {
				if f.Path == SysctlConf {
					conf = f.Content
					continue
				}
				p := filepath.Join(stage, f.Path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, f.Content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(stage, "sysctl.conf"), conf, 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"-m", "-n", "--propagation", "private", "sh", "-c", applyScript, "sh", stage}, keys...)
			out, err := exec.Command("unshare", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("unshare sysctl --system: %v\n%s", err, out)
			}
			before, after := map[string]string{}, map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				f := strings.SplitN(l, " ", 3)
				switch {
				case len(f) == 3 && f[0] == "before":
					before[f[1]] = f[2]
				case len(f) == 3 && f[0] == "after":
					after[f[1]] = f[2]
				default:
					t.Fatalf("unexpected output line %q", l)
				}
			}
			for _, k := range keys {
				s, ok, err := Decides(sc.files, k)
				if err != nil {
					t.Fatalf("Decides(%s): %v", k, err)
				}
				want, from := before[k], "unchanged"
				if ok {
					want, from = s.Value, s.Path
				}
				if !Equal(after[k], want) {
					t.Errorf("%s: sysctl --system left %q, Decides says %q (%s)", k, after[k], want, from)
				}
			}
		})
	}
}

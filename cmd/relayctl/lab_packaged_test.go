package main

// Bringing your own service, on UDP servers this repository did
// not write, installed from Debian packages and run by their own units on
// a lab host booted with a real systemd (internal/lab's Services, in the
// host's relay network namespace):
//   - unbound, told its buffer in its own config syntax (a conf.d drop-in
//     rendered from a template), under an operator's hardening that takes
//     CAP_NET_ADMIN away, so net.core.rmem_max caps what it asks for and
//     it says so itself ("so-rcvbuf N was not granted. Got M.");
//   - memcached, which never calls setsockopt(SO_RCVBUF): its UDP socket
//     gets net.core.rmem_default, and its UDP port is opened by a unit
//     drop-in (ExecStart= with flags) rendered from a template.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/tune"
)

// packagedEnv is a lab host running one packaged service, and a folder for
// its spec and template.
type packagedEnv struct {
	*labEnv
	unit string
}

func startPackagedLab(t *testing.T, svc lab.Service) *packagedEnv {
	t.Helper()
	lab.RequireSystemd(t)
	lab.RequireServices(t, svc.Unit)
	e := startLab(t, []lab.HostOptions{{Systemd: true, Services: []lab.Service{svc}}}, nil)
	return &packagedEnv{labEnv: e, unit: svc.Unit}
}

// write puts a spec (and files beside it) in place.
func (e *packagedEnv) write(t *testing.T, spec string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.spec, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rbs are the rb of each of the unit's UDP sockets on port.
func (e *packagedEnv) rbs(t *testing.T, port int) []uint64 {
	t.Helper()
	socks, err := e.lab.Hosts[0].UnitSockets(context.Background(), e.unit)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, s := range socks {
		if s.Port == port && s.State != "ESTAB" {
			out = append(out, s.Rcvbuf)
		}
	}
	return out
}

func allEqual(rbs []uint64, want uint64) bool {
	for _, rb := range rbs {
		if rb != want {
			return false
		}
	}
	return len(rbs) > 0
}

// journalSince is the unit's journal lines that hold want, of the process
// running now.
func (e *packagedEnv) journalOfMain(t *testing.T, want string) []string {
	t.Helper()
	h := e.lab.Hosts[0]
	pid, err := h.UnitPID(context.Background(), e.unit)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := h.Journal(context.Background(), e.unit, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range lines {
		if strings.Contains(l, fmt.Sprintf("[%d:", pid)) && strings.Contains(l, want) {
			out = append(out, l)
		}
	}
	return out
}

const unboundSpecTemplate = `name: resolvers
hosts:
  - %s
sysctl:
  net.core.rmem_max: %d
relay:
  port: 53
  so_rcvbuf: 4194304
  release:
    kind: none
    program: /usr/sbin/unbound
  config:
    env_file: false
    templates:
      - source: %s
        path: /etc/unbound/unbound.conf.d/90-relayctl.conf
  service:
    manager: systemd
    name: unbound
`

const unboundTemplate = "# Written by relayctl for {{.Host}}: unbound asks the kernel for this buffer on each of its sockets.\nserver:\n  so-rcvbuf: {{.SORcvbuf}}\n"

func TestLabUnboundThroughItsOwnConfig(t *testing.T) {
	e := startPackagedLab(t, lab.Service{Unit: "unbound.service", Files: map[string]string{
		"/etc/unbound/unbound.conf.d/lab.conf": "server:\n  num-threads: 2\n",
		// An operator's hardening: no CAP_NET_ADMIN, so SO_RCVBUFFORCE
		// fails and rmem_max caps what unbound asks for.
		"/etc/systemd/system/unbound.service.d/hardening.conf": "[Service]\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_SETUID CAP_SETGID\n",
	}})
	h := e.lab.Hosts[0]
	if got := e.rbs(t, 53); len(got) != 4 || !allEqual(got, 212992) {
		t.Fatalf("unbound starts with rb %v, want 4 sockets at the kernel default 212992", got)
	}
	spec := func(rmemMax int, tmpl string) string { return fmt.Sprintf(unboundSpecTemplate, h.Name, rmemMax, tmpl) }

	// rmem_max far too low for what unbound asks (under half of it, where
	// unbound warns): the plan says the kernel
	// caps it, the read-back finds the capped rb on all four sockets, and
	// unbound's own warning names the same figure.
	e.write(t, spec(524288, "unbound.tmpl"), map[string]string{"unbound.tmpl": unboundTemplate})
	var vout, verr strings.Builder
	if code := run([]string{"relayctl", "validate", e.spec}, strings.NewReader(""), &vout, &verr); code != 0 {
		t.Fatalf("validate: exit %d\n%s\n%s", code, vout.String(), verr.String())
	}
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	capped := tune.ExpectRcvbuf(4194304, false, 524288, 212992).Effective
	for _, want := range []string{"| `net.core.rmem_max` | `212992` | `524288`", "+    so-rcvbuf: 4194304", fmt.Sprintf("**rb %d**", capped),
		"the kernel caps it silently", "4 sockets now", "none: the service as each host has it (`/usr/sbin/unbound`)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("review lacks %q:\n%s", want, md)
		}
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if got := e.rbs(t, 53); len(got) != 4 || !allEqual(got, uint64(capped)) {
		t.Errorf("rb after apply %v, want 4 sockets at %d", got, capped)
	}
	if w := e.journalOfMain(t, fmt.Sprintf("so-rcvbuf 4194304 was not granted. Got %d.", capped)); len(w) == 0 {
		t.Errorf("unbound's own warning does not name the rb ss shows (%d)", capped)
	}
	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}

	// Enough rmem_max: one window raises it and restarts unbound; every
	// socket reads back as planned and unbound has nothing to warn about.
	e.write(t, spec(8388608, "unbound.tmpl"), nil)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 2: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply 2: exit %d\n%s\n%s", code, out, errs)
	}
	if got := e.rbs(t, 53); len(got) != 4 || !allEqual(got, 8388608) {
		t.Errorf("rb after apply 2: %v, want 4 sockets at 8388608", got)
	}
	if w := e.journalOfMain(t, "was not granted"); len(w) > 0 {
		t.Errorf("unbound still warns: %q", w)
	}
	e.keepExample(t, "unbound")
	if code, out, _ := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 0 {
		t.Errorf("plan again: exit %d, want 0 (nothing to change)\n%s", code, out)
	}

	// A template that renders a config unbound refuses: rolled back, with
	// unbound's own words, and the host as it was.
	e.write(t, spec(8388608, "bad.tmpl"), map[string]string{"bad.tmpl": "server:\n  so-rcvbuff: {{.SORcvbuf}}\n"})
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan bad: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "rolled back") || !strings.Contains(out+errs, "unbound") {
		t.Errorf("apply of a config unbound refuses: exit %d, want rolled back with unbound's words\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if b, _ := h.Exec(context.Background(), "cat", "/etc/unbound/unbound.conf.d/90-relayctl.conf"); !strings.Contains(string(b), "so-rcvbuf: 4194304") {
		t.Errorf("the drop-in after the rollback: %q", b)
	}
	if got := e.rbs(t, 53); len(got) != 4 || !allEqual(got, 8388608) {
		t.Errorf("rb after the rollback %v, want the 4 sockets back at 8388608", got)
	}
	e.write(t, spec(8388608, "unbound.tmpl"), nil)
	if code, out, _ := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 0 {
		t.Errorf("plan after the rollback: exit %d, want 0\n%s", code, out)
	}
}

const memcachedSpecTemplate = `name: caches
hosts:
  - %s
sysctl:
%s
relay:
  port: 11211
  so_rcvbuf: 0
  release:
    kind: none
    program: /usr/bin/memcached
  config:
    env_file: false
    templates:
      - source: %s
        unit_drop_in: 90-relayctl.conf
  service:
    manager: systemd
    name: memcached
`

// The UDP port opened by the unit drop-in: ExecStart= cleared, then
// memcached with flags, the port the plan's.
const memcachedTemplate = "[Service]\nExecStart=\nExecStart=/usr/bin/memcached -U {{.Port}} -p 0 -l 127.0.0.1 -u memcache -m 64\n"

func TestLabMemcachedNeverAsks(t *testing.T) {
	e := startPackagedLab(t, lab.Service{Unit: "memcached.service"})
	h := e.lab.Hosts[0]
	spec := func(sysctl, tmpl string) string { return fmt.Sprintf(memcachedSpecTemplate, h.Name, sysctl, tmpl) }

	// rmem_max alone: the review says it changes nothing for memcached.
	e.write(t, spec("  net.core.rmem_max: 8388608", "udp.tmpl"), map[string]string{"udp.tmpl": memcachedTemplate})
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	for _, want := range []string{"changes nothing for a relay that never calls setsockopt(SO\\_RCVBUF)", "raise net.core.rmem\\_default", "**rb 212992** = rmem_default 212992",
		"+  ExecStart=/usr/bin/memcached -U 11211 -p 0", "systemd unit drop-in `/etc/systemd/system/memcached.service.d/90-relayctl.conf` (from a template): created, then `systemctl daemon-reload`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("review lacks %q:\n%s", want, md)
		}
	}

	// rmem_default is the lever: one window writes the drop-in, raises it
	// and restarts memcached, whose new UDP socket gets it.
	e.write(t, spec("  net.core.rmem_default: 4194304", "udp.tmpl"), nil)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 2: exit %d\n%s\n%s", code, out, errs)
	}
	if md, _ := os.ReadFile(e.plan + ".md"); !strings.Contains(string(md), "**rb 4194304** = rmem_default 4194304") {
		t.Errorf("review 2:\n%s", md)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if got := e.rbs(t, 11211); len(got) != 1 || got[0] != 4194304 {
		t.Errorf("memcached's UDP socket after apply: rb %v, want 4194304", got)
	}
	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}
	e.keepExample(t, "memcached")
	if code, out, _ := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 0 {
		t.Errorf("plan again: exit %d, want 0\n%s", code, out)
	}

	// A drop-in memcached cannot start with: rolled back with its own
	// words, the drop-in and the socket as they were.
	e.write(t, spec("  net.core.rmem_default: 4194304", "bad.tmpl"), map[string]string{"bad.tmpl": strings.Replace(memcachedTemplate, "-U {{.Port}}", "--udp-prot={{.Port}}", 1)})
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan bad: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "rolled back") || !strings.Contains(out+errs, "unrecognized option") {
		t.Errorf("apply of a drop-in memcached refuses: exit %d, want rolled back with memcached's words\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if got := e.rbs(t, 11211); len(got) != 1 || got[0] != 4194304 {
		t.Errorf("after the rollback: rb %v, want memcached back on its UDP socket at 4194304", got)
	}
}

// keepExample copies the spec, its templates, the review and the receipt
// of a run into $RELAYCTL_EXAMPLES/name, for docs/any-service.md.
func (e *packagedEnv) keepExample(t *testing.T, name string) {
	dir := os.Getenv("RELAYCTL_EXAMPLES")
	if dir == "" {
		return
	}
	dst := filepath.Join(dir, name)
	os.MkdirAll(dst, 0o755)
	entries, _ := os.ReadDir(e.dir)
	for _, en := range entries {
		if b, err := os.ReadFile(filepath.Join(e.dir, en.Name())); err == nil && !en.IsDir() {
			os.WriteFile(filepath.Join(dst, en.Name()), b, 0o644)
		}
	}
}

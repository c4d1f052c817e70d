package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
	"github.com/relayctl/relayctl/uplink"
)

// testBoundary is a frame boundary as relayctl makes one.
const testBoundary = "@@relayctl-00112233445566778899aabbccddeeff"

// obsArgs are observe's words (observe.sh's arguments), by name.
type obsArgs struct {
	port, current, releases, config, state, manager, unit, pidFile, keys, control, maxFile, dropIn, program, files, receipt string
	dirs                                                                                                                    []string
}

func (a obsArgs) words() []string {
	return append([]string{a.port, a.current, a.releases, a.config, a.state, a.manager, a.unit, a.pidFile, a.keys, a.control,
		a.maxFile, a.dropIn, a.program, a.files, a.receipt}, a.dirs...)
}

// query is the relayctl query these words are made of (rollout/shellhost's
// args), to read the answer as relayctl does.
func (a obsArgs) query() rollout.Query {
	q := rollout.Query{Keys: shellSplit(a.keys), Port: atoi(a.port), Control: a.control,
		Paths:   plans.PlanPaths{Current: a.current, Releases: a.releases, RelayConfig: a.config, StateDir: a.state},
		Service: plans.PlanService{Manager: a.manager, Name: a.unit, PIDFile: a.pidFile}}
	if a.program != "-" {
		q.Program = a.program
	}
	if a.files != "-" {
		q.Files = shellSplit(a.files)
	}
	switch {
	case a.receipt == "last-apply":
		q.LastApply = true
	case strings.HasPrefix(a.receipt, "undo:"):
		q.UndoOf = "sha256:" + strings.TrimPrefix(a.receipt, "undo:")
	}
	return q
}

// obsHost is a relay host laid out in a folder of root's alone: a release
// (a copy of sleep), the current link, the relay config, a sysctl.d
// folder and the state folder.
type obsHost struct {
	root string
	a    obsArgs
}

func newObsHost(t *testing.T) *obsHost {
	t.Helper()
	state := stateDir(t)
	root := filepath.Dir(state)
	h := &obsHost{root: root, a: obsArgs{port: "7788", current: root + "/current", releases: root + "/releases", config: root + "/etc/relayd.env",
		state: state, manager: "command", pidFile: root + "/run/relayd.pid", keys: "net.core.rmem_max,net.core.somaxconn", maxFile: "1024",
		dropIn: "-", program: "-", files: "-", receipt: "-", dirs: []string{root + "/sysctl.d"}}}
	for _, d := range []string{"releases/1.7.0", "etc", "run", "sysctl.d", "state/receipts"} {
		must(t, os.MkdirAll(root+"/"+d, 0o755))
	}
	sleep, err := exec.LookPath("sleep")
	must(t, err)
	b, err := os.ReadFile(sleep)
	must(t, err)
	must(t, os.WriteFile(root+"/releases/1.7.0/relayd", b, 0o755))
	must(t, os.Symlink("releases/1.7.0", root+"/current"))
	must(t, os.WriteFile(h.a.config, []byte("RELAYD_SO_RCVBUF=4194304\nTOKEN=s3cret\n"), 0o600))
	must(t, os.WriteFile(root+"/sysctl.d/10-relay.conf", []byte("net.core.rmem_max = 8388608\n"), 0o644))
	return h
}

// startRelay starts the release (sleep) holding sock, if any, as a relay
// holds its socket, and writes its pid file (root's, 0644).
func (h *obsHost) startRelay(t *testing.T, sock *net.UDPConn) int {
	t.Helper()
	c := exec.Command(h.a.releases+"/1.7.0/relayd", "60")
	if sock != nil {
		f, err := sock.File()
		must(t, err)
		defer f.Close()
		c.ExtraFiles = []*os.File{f}
	}
	must(t, c.Start())
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	must(t, os.WriteFile(h.a.pidFile, []byte(strconv.Itoa(c.Process.Pid)+"\n"), 0o644))
	return c.Process.Pid
}

// observeOn runs observe with these words as a session's first request:
// the answer's word and, for DATA, its bytes.
func observeOn(t *testing.T, state string, words []string) (string, []byte) {
	t.Helper()
	out := runSession(t, state, req("observe", 0, nil, words, testBoundary))
	head, rest, _ := strings.Cut(out, "\n")
	if n, ok := strings.CutPrefix(head, "DATA "); ok {
		if len(rest) != atoi(n) {
			t.Fatalf("DATA %s with %d bytes", n, len(rest))
		}
		return "DATA", []byte(rest)
	}
	return head, nil
}

// read is observe on h, parsed as relayctl parses it: its frames by name
// (and their order), and its facts.
func (h *obsHost) read(t *testing.T) (map[string]hostfacts.Frame, []string, *plans.Facts) {
	t.Helper()
	word, out := observeOn(t, h.a.state, h.a.words())
	if word != "DATA" {
		t.Fatalf("observe: %s", word)
	}
	frames, err := hostfacts.ParseFrames(out, testBoundary)
	if err != nil {
		t.Fatalf("relayctl refuses the output: %v\n%s", err, out)
	}
	by := map[string]hostfacts.Frame{}
	var names []string
	for _, fr := range frames {
		by[fr.Name] = fr
		names = append(names, fr.Name)
	}
	f, err := hostfacts.FactsFromFrames(frames, h.a.query())
	if err != nil {
		t.Fatalf("facts: %v\n%s", err, out)
	}
	return by, names, f
}

// The sections come in observe.sh's order, framed as it framed them: a
// command's output as it is, a value without its newline, absent with
// status 2; relayctl makes facts of them.
func TestObserveFraming(t *testing.T) {
	h := newObsHost(t)
	h.a.keys += ",net.core.no_such_key"
	by, names, f := h.read(t)
	want := []string{"clock", "kernel", "hostname", "arch", "uid", "netns-self", "netns-probe",
		"sysctl net.core.rmem_max", "sysctl-writable net.core.rmem_max", "sysctl net.core.somaxconn", "sysctl-writable net.core.somaxconn",
		"sysctl net.core.no_such_key", "file " + h.root + "/sysctl.d/10-relay.conf", "current-link", "releases", "relay-config", "service", "ss", "proc-net-udp", "proc-net-snmp"}
	var got []string
	for _, n := range names {
		if slices.Contains(want, n) {
			got = append(got, n)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("sections in order:\n%q\nwant\n%q", got, want)
	}
	for _, tt := range []struct {
		name, data string
		status     int
	}{
		{"uid", "0\n", 0},
		{"netns-probe", "644\n", 0},
		{"sysctl net.core.no_such_key", "absent\n", 2},
		{"sysctl-writable net.core.rmem_max", "yes\n", 0},
		{"current-link", "releases/1.7.0\n", 0},
		{"releases", "1.7.0", 0},
		{"service", "", 0},
		{"relay-config", "RELAYD_SO_RCVBUF=4194304\nTOKEN=s3cret\n", 0},
	} {
		if fr := by[tt.name]; string(fr.Data) != tt.data || fr.Status != tt.status {
			t.Errorf("%s: got %q status %d, want %q status %d", tt.name, fr.Data, fr.Status, tt.data, tt.status)
		}
	}
	if f.Kernel == "" || f.Arch == "" || !f.InitialNetns || f.Release.Current != "1.7.0" || !f.Config.Exists || f.Service.Running {
		t.Errorf("facts: kernel %q arch %q initial netns %v current %q config %v running %v", f.Kernel, f.Arch, f.InitialNetns, f.Release.Current, f.Config.Exists, f.Service.Running)
	}
	if rb := f.Sysctls["net.core.rmem_max"]; !rb.Exists || rb.Value == "" || !rb.Writable || f.Sysctls["net.core.no_such_key"].Exists {
		t.Errorf("sysctls: %+v", f.Sysctls)
	}
}

// A pid file is trusted only if root alone can write it, and its process
// only if it runs a release: else it says why, and nothing is read back.
func TestObservePIDFileTrust(t *testing.T) {
	h := newObsHost(t)
	pid := h.startRelay(t, nil)
	if _, _, f := h.read(t); !f.Service.Running || f.Service.PID != pid || !strings.HasPrefix(f.Release.RunningExe, h.a.releases+"/") {
		t.Fatalf("root's 0644 pid file: %+v, exe %q", f.Service, f.Release.RunningExe)
	}
	for _, tt := range []struct {
		name  string
		setup func()
		want  string
	}{
		{"writable by others", func() { os.Chmod(h.a.pidFile, 0o666) }, "is owned by uid 0 with mode 666: only root may write it"},
		{"writable by its group", func() { os.Chmod(h.a.pidFile, 0o664) }, "with mode 664"},
		{"another user's", func() { os.Chmod(h.a.pidFile, 0o644); os.Chown(h.a.pidFile, 1000, 1000) }, "is owned by uid 1000 with mode 644"},
		{"setuid", func() { os.Chown(h.a.pidFile, 0, 0); os.Chmod(h.a.pidFile, os.ModeSetuid|0o644) }, "with mode 4644"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			by, _, f := h.read(t)
			if fr, ok := by["pidfile-untrusted"]; !ok || !strings.Contains(string(fr.Data), tt.want) {
				t.Errorf("pidfile-untrusted: %q, want %q", fr.Data, tt.want)
			}
			if f.Service.Running || !strings.Contains(f.Service.Detail, tt.want) {
				t.Errorf("service: %+v", f.Service)
			}
		})
	}
	// Root's, that nobody may write, with a mode under 010 (observe.sh's
	// pattern of stat's digits refused it): trusted.
	os.Chown(h.a.pidFile, 0, 0)
	os.Chmod(h.a.pidFile, 0o004)
	if _, _, f := h.read(t); !f.Service.Running {
		t.Errorf("root's pid file of mode 004: %+v", f.Service)
	}
	// A symlink to root's own pid file is no pid file.
	os.Chmod(h.a.pidFile, 0o644)
	must(t, os.Rename(h.a.pidFile, h.a.pidFile+".real"))
	must(t, os.Symlink(h.a.pidFile+".real", h.a.pidFile))
	if by, _, f := h.read(t); f.Service.Running || string(by["service"].Data) != "" {
		t.Errorf("a symlinked pid file: %+v", f.Service)
	}
	// A pid that runs something else than a release (pid 1) is named, not read back.
	os.Remove(h.a.pidFile)
	must(t, os.WriteFile(h.a.pidFile, []byte("1\n"), 0o644))
	by, _, f := h.read(t)
	if fr := by["untrusted-pid"]; !strings.HasPrefix(string(fr.Data), "1 ") || f.Service.Running || !strings.Contains(f.Service.Detail, "not the service's program") {
		t.Errorf("pid 1: untrusted-pid %q, service %+v", fr.Data, f.Service)
	}
	if _, ok := by["relay-netns"]; ok {
		t.Error("an untrusted pid's namespace was read")
	}
}

// The relay config may hold secrets: it is read only from a folder root
// alone can write, never through a symlink; else nothing of it (nor of
// what a symlink points at) leaves the host.
func TestObserveConfigTrust(t *testing.T) {
	h := newObsHost(t)
	dir := filepath.Dir(h.a.config)
	for _, tt := range []struct {
		name  string
		setup func()
		want  string
	}{
		{"a folder others can write", func() { os.Chmod(dir, 0o777) }, "(the folder of " + h.a.config + ") is owned by uid 0 with mode 777: others can write it"},
		{"a sticky folder", func() { os.Chmod(dir, os.ModeSticky|0o777) }, "with mode 1777"},
		{"a folder of another user", func() { os.Chmod(dir, 0o755); os.Chown(dir, 1000, 1000) }, "is owned by uid 1000 with mode 755"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			by, _, f := h.read(t)
			if fr := by["relay-config-unsafe"]; !strings.Contains(string(fr.Data), tt.want) {
				t.Errorf("relay-config-unsafe: %q, want %q", fr.Data, tt.want)
			}
			if _, ok := by["relay-config"]; ok || f.Config.Exists || f.Config.Unsafe == "" {
				t.Errorf("the config was read: %+v", f.Config)
			}
		})
	}
	os.Chown(dir, 0, 0)
	os.Chmod(dir, 0o755)
	// A symlink to a secret elsewhere.
	secret := h.root + "/secret"
	must(t, os.WriteFile(secret, []byte("PRIVATE KEY\n"), 0o600))
	os.Remove(h.a.config)
	must(t, os.Symlink(secret, h.a.config))
	word, out := observeOn(t, h.a.state, h.a.words())
	if word != "DATA" || strings.Contains(string(out), "PRIVATE KEY") || !strings.Contains(string(out), h.a.config+" is a symlink") {
		t.Errorf("a symlinked config: %s\n%s", word, out)
	}
	// A FIFO does not hold observe up.
	os.Remove(h.a.config)
	must(t, syscallMkfifo(h.a.config))
	done := make(chan struct{})
	go func() {
		defer close(done)
		by, _, _ := h.read(t)
		if fr := by["relay-config"]; fr.Status == 0 {
			t.Errorf("a FIFO read as the config: %q", fr.Data)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("observe waits on a FIFO")
	}
}

// Files are cut at MAXFILE+1 bytes: relayctl sees one more than it takes,
// and says the file is too large rather than plan from part of it.
func TestObserveCutsFilesAtMaxFilePlusOne(t *testing.T) {
	h := newObsHost(t)
	big := strings.Repeat("# a long comment\n", 1000)
	must(t, os.WriteFile(h.root+"/sysctl.d/20-big.conf", []byte(big), 0o644))
	by, _, _ := h.read(t)
	if fr := by["file "+h.root+"/sysctl.d/20-big.conf"]; len(fr.Data) != 1025 || string(fr.Data) != big[:1025] {
		t.Errorf("a %d-byte file: got %d bytes, want 1025", len(big), len(fr.Data))
	}
	// relayctl's own bound is plans.MaxHostFile: read as it sends it.
	h.a.maxFile = strconv.Itoa(plans.MaxHostFile)
	must(t, os.WriteFile(h.root+"/sysctl.d/20-big.conf", []byte(strings.Repeat("x", plans.MaxHostFile+5000)), 0o644))
	_, _, f := h.read(t)
	if !slices.ContainsFunc(f.SkippedFiles, func(s string) bool { return strings.Contains(s, "20-big.conf is larger than") }) {
		t.Errorf("skipped: %q", f.SkippedFiles)
	}
	must(t, os.WriteFile(h.a.config, []byte(strings.Repeat("A=1\n", plans.MaxHostFile)), 0o600))
	word, out := observeOn(t, h.a.state, h.a.words())
	frames, err := hostfacts.ParseFrames(out, testBoundary)
	if word != "DATA" || err != nil {
		t.Fatal(word, err)
	}
	if _, err := hostfacts.FactsFromFrames(frames, h.a.query()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a huge relay config: %v", err)
	}
}

// Text a host wrote that holds the frame boundary makes relayctl refuse
// the whole output: the agent frames it as it is, and it stays so.
func TestObserveBoundaryInAFileIsRefused(t *testing.T) {
	h := newObsHost(t)
	for name, content := range map[string]string{
		"the boundary":         "x = " + testBoundary + "\n",
		"a section of its own": "x\n" + testBoundary + " end 0\n" + testBoundary + " service\n1\n",
	} {
		must(t, os.WriteFile(h.a.config, []byte(content), 0o600))
		_, out := observeOn(t, h.a.state, h.a.words())
		if _, err := hostfacts.ParseFrames(out, testBoundary); !errors.Is(err, hostfacts.ErrForgedFrame) {
			t.Errorf("%s in the relay config: got %v, want a forged frame", name, err)
		}
	}
}

func syscallMkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

// sysctl.d: files by name, dot names and non-.conf files left out, a
// folder aliased by a symlink read once, and names with odd characters
// reported once per folder (observe.sh's two reports of one folder made
// relayctl refuse the observe).
func TestObserveSysctlFiles(t *testing.T) {
	h := newObsHost(t)
	d := h.root + "/sysctl.d"
	for _, n := range []string{"30-b.conf", "20-a.conf", ".hidden.conf", "notes.txt", "odd name.conf", "odd$(x).conf"} {
		must(t, os.WriteFile(d+"/"+n, []byte("# "+n+"\n"), 0o644))
	}
	must(t, syscallMkfifo(d+"/40-fifo.conf"))
	must(t, os.Symlink("sysctl.d", h.root+"/alias.d"))
	h.a.dirs = []string{d, h.root + "/alias.d", h.root + "/missing.d"}
	by, names, f := h.read(t)
	var files []string
	for _, n := range names {
		if strings.HasPrefix(n, "file "+h.root) {
			files = append(files, strings.TrimPrefix(n, "file "+d+"/"))
		}
	}
	if want := []string{"10-relay.conf", "20-a.conf", "30-b.conf"}; !slices.Equal(files, want) {
		t.Errorf("files: %q, want %q", files, want)
	}
	if fr, ok := by["skipped "+d]; !ok || string(fr.Data) != "a file name with unusual characters" {
		t.Errorf("skipped: %q", fr.Data)
	}
	if len(f.SkippedFiles) != 1 {
		t.Errorf("skipped files: %q", f.SkippedFiles)
	}
}

// Keys that are not sysctl keys never read a path outside /proc/sys.
func TestObserveKeysStayInProcSys(t *testing.T) {
	h := newObsHost(t)
	h.a.keys = "kernel,..,net.core.rmem_max"
	by, _, _ := h.read(t)
	for _, k := range []string{"kernel", ".."} {
		if fr := by["sysctl "+k]; fr.Status != 2 || string(fr.Data) != "absent\n" {
			t.Errorf("key %q: %q status %d, want absent", k, fr.Data, fr.Status)
		}
	}
}

// Receipts: the newest one with a read-back, or of a plan with a record
// of its window; a name relayctl does not give (odd characters), a
// symlink and a receipt in a folder others can write are not read.
func TestObserveReceipts(t *testing.T) {
	h := newObsHost(t)
	rd := h.a.state + "/receipts/"
	sum := strings.Repeat("ab", 32)
	receipt := func(name, body string) { must(t, os.WriteFile(rd+name, []byte(body), 0o644)) }
	receipt("2026-01-01T00-00-00Z-a.json", `{"plan": "p", "plan_checksum": "sha256:`+sum+`", "outcome": "applied", "drops_after": {"ss_drops": 1}, "undo": {}}`)
	receipt("2026-01-02T00-00-00Z-b.json", `{"plan": "p", "outcome": "staged"}`)
	receipt("2026-01-03T00-00-00Z c.json", `{"plan": "ODD", "drops_after": {}, "plan_checksum": "sha256:`+sum+`", "undo": {}}`)
	must(t, os.WriteFile(h.root+"/other.json", []byte(`{"plan": "LINKED", "drops_after": {}}`), 0o644))
	must(t, os.Symlink(h.root+"/other.json", rd+"2026-01-04T00-00-00Z-d.json"))
	must(t, os.Mkdir(rd+"2026-01-01T00-00-00Z-a.backups", 0o700))
	must(t, os.WriteFile(rd+"2026-01-01T00-00-00Z-a.backups/backup-relay-config", nil, 0o600))

	h.a.receipt = "last-apply"
	word, out := observeOn(t, h.a.state, h.a.words())
	if word != "DATA" || strings.Contains(string(out), "ODD") || strings.Contains(string(out), "LINKED") {
		t.Errorf("an odd or linked receipt was read:\n%s", out)
	}
	_, _, f := h.read(t)
	if f.LastApply == nil || f.LastApply.Receipt != "2026-01-01T00-00-00Z-a.json" {
		t.Errorf("last apply: %+v", f.LastApply)
	}

	h.a.receipt = "undo:" + sum
	by, _, f := h.read(t)
	if string(by["undo-name"].Data) != "2026-01-01T00-00-00Z-a" || string(by["undo-backups"].Data) != "backup-relay-config\n" || by["undo-receipt"].Status != 0 {
		t.Errorf("undo: name %q backups %q receipt %d", by["undo-name"].Data, by["undo-backups"].Data, by["undo-receipt"].Status)
	}
	if f.Undo == nil || f.Undo.Receipt != "2026-01-01T00-00-00Z-a" || !slices.Equal(f.Undo.Backups, []string{"backup-relay-config"}) {
		t.Errorf("undo facts: %+v", f.Undo)
	}
	// The receipts folder opened to others: the record is not trusted.
	os.Chmod(rd, 0o777)
	by, _, _ = h.read(t)
	if _, ok := by["undo-receipt-unsafe"]; !ok {
		t.Errorf("a receipt in a folder others can write was read: %q", by["undo-receipt"].Data)
	}
	os.Chmod(rd, 0o755)
	// A checksum that is not hex matches nothing.
	h.a.receipt = "undo:" + sum + "\"x"
	if by, _, _ := h.read(t); by["undo-name"].Data != nil {
		t.Errorf("a bad checksum matched %q", by["undo-name"].Data)
	}
}

// Without a pid file or unit, the relay is the one process running a
// release with a UDP socket on the port; two are named, not guessed.
func TestObserveFindsTheRelayBySocket(t *testing.T) {
	h := newObsHost(t)
	sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer sock.Close()
	h.a.port = strconv.Itoa(sock.LocalAddr().(*net.UDPAddr).Port)
	h.a.manager = "none"
	pid := h.startRelay(t, sock)
	by, _, f := h.read(t)
	if fr := by["found-by"]; fr.Status != 0 || f.Service.PID != pid || !f.Socket.Found {
		t.Errorf("found-by %q status %d; service %+v socket %+v", fr.Data, fr.Status, f.Service, f.Socket)
	}
	pid2 := h.startRelay(t, sock)
	by, _, f = h.read(t)
	want := fmt.Sprintf("2 processes running a release in %s have udp/%s: ", h.a.releases, h.a.port)
	if fr := by["found-by"]; fr.Status != 1 || !strings.HasPrefix(string(fr.Data), want) || !strings.Contains(string(fr.Data), strconv.Itoa(pid2)) || f.Service.Running {
		t.Errorf("two relays: found-by %q status %d, want %q", fr.Data, fr.Status, want)
	}
}

// Observe's words are checked: a boundary relayctl did not make, a bad
// port, too few words.
func TestObserveRefusesBadWords(t *testing.T) {
	h := newObsHost(t)
	short := h.a.words()[:14]
	badPort := h.a
	badPort.port = "77; reboot"
	badControl := h.a
	badControl.control = "example.com:80"
	for name, tt := range map[string]struct {
		b     string
		words []string
		want  string
	}{
		"a blank boundary":  {"", h.a.words(), "ERR observe: bad frame boundary"},
		"a guessable one":   {"@@relayctl-", h.a.words(), "ERR observe: bad frame boundary"},
		"too few words":     {testBoundary, short, "ERR observe: want at least 15 words, got 14"},
		"a bad port":        {testBoundary, badPort.words(), `ERR observe: bad port "77; reboot"`},
		"a control by name": {testBoundary, badControl.words(), `ERR observe: bad control address "example.com:80"`},
	} {
		if out := runSession(t, h.a.state, req("observe", 0, nil, tt.words, tt.b)); out != tt.want+"\n" {
			t.Errorf("%s: got %q, want %q", name, out, tt.want)
		}
	}
}

// observe reports the forms keep decodes: every packed encoding relayctl
// sends, each one the agent takes.
func TestObserveReportsWhatKeepDecodes(t *testing.T) {
	for _, enc := range uplink.Encodings {
		if !slices.Contains(decodes, enc) {
			t.Errorf("%s is not reported", enc)
		}
	}
	for _, enc := range decodes {
		if err := knownEncoding(enc); err != nil {
			t.Errorf("reported %s: %v", enc, err)
		}
	}
	h := newObsHost(t)
	if by, _, f := h.read(t); string(by["decoders"].Data) != "gzip zstd zstd-patch" || strings.Join(f.Release.Decoders, " ") != "gzip zstd zstd-patch" {
		t.Errorf("decoders %q, facts %q", by["decoders"].Data, f.Release.Decoders)
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/relayctl/relayctl/relay/bench"
)

// The bench command is tested as users run it: the relayctl binary, built
// here, under prlimit, against relayd on loopback.

// buildBenchBins builds relayctl and relayd into the test's temporary
// directory (the build cache makes the second test's builds cheap).
func buildBenchBins(t *testing.T) (relayctl, relayd string) {
	t.Helper()
	if testing.Short() {
		t.Skip("drives the real relayd for seconds; skipped under -short (make test runs it)")
	}
	dir := t.TempDir()
	relayctl, relayd = filepath.Join(dir, "relayctl"), filepath.Join(dir, "relayd")
	for _, b := range []struct{ out, pkg string }{
		{relayctl, "github.com/relayctl/relayctl/cmd/relayctl"},
		{relayd, "github.com/relayctl/relayctl/cmd/relayd"},
	} {
		out, err := exec.Command("go", "build", "-ldflags", "-X main.Version=test", "-o", b.out, b.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return relayctl, relayd
}

func runBench(t *testing.T, relayctl, prlimit string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	argv := append([]string{"--nofile=" + prlimit, relayctl, "bench"}, args...)
	cmd := exec.Command("prlimit", argv...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run relayctl bench: %v", err)
	}
	return o.String(), e.String(), code
}

// TestBenchPreflightRefuses is mistake 3: with RLIMIT_NOFILE lowered below
// what 400 players need, the bench refuses before sending anything, and
// says the limit is the bench machine's.
func TestBenchPreflightRefuses(t *testing.T) {
	// Stand-ins that only record whether anything arrived: nothing may.
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ctl, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()

	relayctl, _ := buildBenchBins(t)
	stdout, stderr, code := runBench(t, relayctl, "64:64", "--relay", udp.LocalAddr().String(), "--control", ctl.Addr().String(), "--players", "8:400:8")
	want := "relayctl: error: the bench machine cannot open 400 sockets: RLIMIT_NOFILE is 64 (hard 64); this limit is on the machine running the bench, not on the relay\n" +
		"relayctl: hint: raise it with ulimit -n 4096 (or LimitNOFILE= in a unit)\n"
	if stderr != want {
		t.Errorf("stderr: got\n%s\nwant\n%s", stderr, want)
	}
	if code != 1 {
		t.Errorf("got exit %d, want 1", code)
	}
	if stdout != "" {
		t.Errorf("stdout: got %q, want nothing", stdout)
	}
	udp.SetReadDeadline(time.Now()) // already past: only what is queued
	if n, _, err := udp.ReadFromUDP(make([]byte, 2048)); err == nil {
		t.Errorf("the relay address received a %d-byte datagram, want nothing sent", n)
	}
	ctl.SetDeadline(time.Now())
	if c, err := ctl.Accept(); err == nil {
		c.Close()
		t.Errorf("the control address was connected to, want nothing before the preflight passes")
	}
}

var relaydStarted = regexp.MustCompile(`msg="relayd started".* listen=(\S+) control=(\S+)`)

func startTestRelayd(t *testing.T, bin string, args ...string) (cmd *exec.Cmd, udp, control string) {
	t.Helper()
	cmd, udp, control, err := startRelaydProc(bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRelayd(cmd) })
	return cmd, udp, control
}

// startRelaydProc starts relayd on ephemeral loopback ports and returns
// once it has said where it listens; stop it with stopRelayd.
func startRelaydProc(bin string, args ...string) (cmd *exec.Cmd, udp, control string, err error) {
	// nice -10: go test runs other packages' tests beside this one on a
	// 2-core machine; the bench would rightly call a starved step invalid.
	cmd = exec.Command("nice", append([]string{"-n", "-10", bin, "--config", os.DevNull, "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0"}, args...)...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", fmt.Errorf("start relayd: %w", err)
	}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if m := relaydStarted.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
				break
			}
		}
		io.Copy(io.Discard, pipe)
	}()
	select {
	case m := <-found:
		return cmd, m[1], m[2], nil
	case <-time.After(10 * time.Second):
		stopRelayd(cmd)
		return nil, "", "", errors.New("relayd did not report its addresses within 10s")
	}
}

func stopRelayd(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// TestBenchJSONAndPlot runs a short bench with a soft limit below the need
// and a hard one above it: the bench goes ahead (the soft limit is raised),
// writes its JSON report on stdout, the chart to --plot, progress to stderr.
func TestBenchJSONAndPlot(t *testing.T) {
	relayctl, relayd := buildBenchBins(t)
	_, udp, control := startTestRelayd(t, relayd)
	plot := filepath.Join(t.TempDir(), "bench.svg")
	stdout, stderr, code := runBench(t, relayctl, "20:4096", "--relay", udp, "--control", control,
		"--players", "8", "--lobby-size", "4", "--hz", "30", "--step-duration", "1s", "--calibrate", "200ms",
		"--interval", "300ms", "--json", "--plot", plot)
	if code != 0 {
		t.Fatalf("got exit %d, want 0; stderr:\n%s", code, stderr)
	}
	var rep struct {
		Preflight struct {
			NoFile uint64 `json:"rlimit_nofile"`
		} `json:"preflight"`
		Calibration *struct {
			SendPPS float64 `json:"send_pps"`
		} `json:"calibration"`
		Steps []struct {
			Players  int     `json:"players"`
			FanOut   float64 `json:"fan_out"`
			Planned  uint64  `json:"planned"`
			RelayTx  uint64  `json:"relay_tx"`
			Received uint64  `json:"received"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("decode stdout as the JSON report: %v\n%s", err, stdout)
	}
	if rep.Preflight.NoFile != 4096 {
		t.Errorf("got RLIMIT_NOFILE %d in the report, want the soft limit raised to the hard 4096", rep.Preflight.NoFile)
	}
	if rep.Calibration == nil || rep.Calibration.SendPPS <= 0 {
		t.Errorf("got calibration %+v, want a measured send rate", rep.Calibration)
	}
	if len(rep.Steps) != 1 || rep.Steps[0].Players != 8 || rep.Steps[0].FanOut != 3 || rep.Steps[0].Planned != 240 {
		t.Errorf("got steps %+v, want one step of 8 players, fan-out 3, 240 planned", rep.Steps)
	}
	if !strings.Contains(stderr, "bench: 8 players: loss") || !strings.Contains(stderr, "relayctl: wrote "+plot) {
		t.Errorf("stderr: got\n%s\nwant the step's progress line and the plot's path", stderr)
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatalf("read plot: %v", err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed SVG: %v", err)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"ramp going down", []string{"--players", "40:8:8"}, "relayctl: error: parse players \"40:8:8\": last step (8) below the first (40): the ramp only grows\n"},
		{"lobby of one", []string{"--lobby-size", "1"}, "relayctl: error: lobby size 1: a lobby needs at least 2 players to forward anything\n"},
		{"plot format", []string{"--plot", "out.gif"}, "relayctl: error: plot out.gif: want a .png or .svg file name\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o, e bytes.Buffer
			args := append([]string{"relayctl", "bench", "--relay", "127.0.0.1:9", "--control", "127.0.0.1:9"}, tt.args...)
			code := run(args, strings.NewReader(""), &o, &e)
			if code != 1 || e.String() != tt.want {
				t.Errorf("got exit %d, stderr %q, want 1, %q", code, e.String(), tt.want)
			}
		})
	}
}

// TestBenchGateScripts runs the capacity gate's scripts (testdata/gate)
// against the real relayd: "relayd-start ARGS..." starts one on loopback
// ports and sets $RELAY and $CONTROL; it stops with the script.
func TestBenchGateScripts(t *testing.T) {
	_, relayd := buildBenchBins(t)
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/gate",
		UpdateScripts: os.Getenv("UPDATE_SCRIPTS") == "1",
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"relayctl-exit": relayctlExit,
			"relayd-start": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg {
					ts.Fatalf("relayd-start cannot be negated")
				}
				cmd, udp, control, err := startRelaydProc(relayd, args...)
				if err != nil {
					ts.Fatalf("%v", err)
				}
				ts.Defer(func() { stopRelayd(cmd) })
				ts.Setenv("RELAY", udp)
				ts.Setenv("CONTROL", control)
			},
		},
	})
}

// TestBenchStepLineRestart: the step's progress line says that the relay
// restarted, what it cut, the bench's own direction of the loss, and the
// ICMP errors.
func TestBenchStepLineRestart(t *testing.T) {
	var e bytes.Buffer
	p := newProgressLine(&e)
	s := bench.Step{Players: 64, LossPct: 0.347, Valid: true, Impact: bench.Impact{
		Restarts: []bench.Restart{{FromPID: 10, ToPID: 20, After: 5, Before: 5.25, LobbiesCut: 8, PlayersCut: 64}},
		Census:   true, LostIn: 136, LostOut: 168, ICMPErrors: 128, ICMPPlayers: 64,
	}}
	p.stepDone(0, s)
	want := "bench: 64 players: loss 0.347% (bench's own count: in 136, out 168), p99 0s, valid; the relay restarted between 5.00s and 5.25s into the step (pid 10 → 20): 8 lobbies and 64 players cut; 128 ICMP errors on 64 player sockets\n"
	if e.String() != want {
		t.Errorf("got  %q\nwant %q", e.String(), want)
	}
}

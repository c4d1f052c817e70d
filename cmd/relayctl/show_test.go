package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: what relayctl writes to tty, the
// test reads from pty.
func openPTY(t testing.TB) (pty, tty *os.File) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { pty.Close() })
	if err := unix.IoctlSetPointerInt(int(pty.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(pty.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open tty: %v", err)
	}
	return pty, tty
}

// reviewPlan makes a plan offline from the files of testdata/script/review.txtar.
func reviewPlan(t *testing.T) string {
	t.Helper()
	ar, err := txtar.ParseFile("testdata/script/review.txtar")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range ar.Files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plan := filepath.Join(dir, "x.plan")
	var stderr bytes.Buffer
	if code := run([]string{"relayctl", "plan", filepath.Join(dir, "spec.yaml"), "--facts", filepath.Join(dir, "facts.json"), "--out", plan, "--detailed-exitcode"}, nil, io.Discard, &stderr); code != 2 {
		t.Fatalf("plan: exit %d, want 2: %s", code, stderr.String())
	}
	return plan
}

// showOnTTY runs relayctl show with stdout a real terminal and returns
// what the terminal got.
func showOnTTY(t *testing.T, plan string) string {
	pty, tty := openPTY(t)
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(pty) // ends with EIO once the tty is closed
		got <- b
	}()
	var stderr bytes.Buffer
	code := run([]string{"relayctl", "show", plan}, nil, tty, &stderr)
	tty.Close()
	out := <-got
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "\x1b") {
		t.Errorf("colour on stderr: %q", stderr.String())
	}
	return strings.ReplaceAll(string(out), "\r\n", "\n") // the tty's onlcr
}

// On a terminal the review is coloured; with NO_COLOR or TERM=dumb it is
// not, and the text is the review's either way.
func TestShowColour(t *testing.T) {
	plan := reviewPlan(t)
	md, err := os.ReadFile(plan + ".md")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "xterm")
	out := showOnTTY(t, plan)
	for _, want := range []string{
		"\x1b[1m# relayctl plan: ashburn-rcvbuf\x1b[0m\n",
		"\x1b[1m--- /etc/relay/relayd.env (current)\x1b[0m\n",
		"\x1b[36m@@ -2,7 +2,7 @@\x1b[0m\n",
		"\x1b[31m-* RELAYD_SO_RCVBUF=0\x1b[0m\n",
		"\x1b[32m+* RELAYD_SO_RCVBUF=4194304\x1b[0m\n",
		"\n   API_TOKEN=••• (sha256:f18a7567f211)\n", // context: no colour
		"\n```\n", // the fence itself is not coloured
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the coloured review lacks %q", want)
		}
	}
	plain := strings.NewReplacer("\x1b[0m", "", "\x1b[1m", "", "\x1b[31m", "", "\x1b[32m", "", "\x1b[33m", "", "\x1b[36m", "").Replace(out)
	if plain != string(md) {
		t.Errorf("without its colours, the review on a terminal is not PLAN.md:\n%s", plain)
	}

	for _, env := range [][2]string{{"NO_COLOR", "1"}, {"TERM", "dumb"}} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			if out := showOnTTY(t, plan); out != string(md) {
				t.Errorf("with %s=%s the terminal got something else than PLAN.md (colour?):\n%q", env[0], env[1], out)
			}
		})
	}
}

func TestColorReviewBlockersAndWarnings(t *testing.T) {
	in := "## Read first\n\n- **BLOCKED** a: b\n- **warning** a: c\n- not a note\n"
	want := "\x1b[1m## Read first\x1b[0m\n\n\x1b[31m- **BLOCKED** a: b\x1b[0m\n\x1b[33m- **warning** a: c\x1b[0m\n- not a note\n"
	if got := string(colorReview([]byte(in))); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

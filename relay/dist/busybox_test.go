package dist_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shell runs a script of relay-service's functions with its arguments, as
// sh -c SCRIPT sh ARGS... does.
type shell func(script string, args ...string) *exec.Cmd

// machineShell is the machine's sh and PATH (on Debian: dash, coreutils).
func machineShell(script string, args ...string) *exec.Cmd {
	return exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
}

// busyboxBinary is Debian's busybox-static.
const busyboxBinary = "/bin/busybox"

// busyboxShell is busybox's sh with a PATH of busybox's applets only, as
// a busybox host has them. Without busybox it skips, or fails with
// CI=true (scripts/lab-deps.sh installs it).
func busyboxShell(t *testing.T) (shell, string) {
	t.Helper()
	out, err := exec.Command(busyboxBinary, "--list").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s --list: %v (Debian package busybox-static)", busyboxBinary, err)
		}
		t.Skipf("%s --list: %v (Debian package busybox-static; set CI=true to make this a failure)", busyboxBinary, err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(out)) {
		if err := os.Symlink(busyboxBinary, filepath.Join(bin, a)); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + bin}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return func(script string, args ...string) *exec.Cmd {
		c := exec.Command(busyboxBinary, append([]string{"sh", "-c", script, "sh"}, args...)...)
		c.Env = slices.Clone(env)
		return c
	}, bin
}

// TestBusyboxScriptFunctions runs the tests of relay-service's functions
// with busybox 1.35's sh, stat, readlink, sed and awk in place of dash,
// coreutils and gawk: the same answers.
func TestBusyboxScriptFunctions(t *testing.T) {
	sh, _ := busyboxShell(t)
	t.Run("listening", func(t *testing.T) { testListening(t, sh) })
	t.Run("private_above", func(t *testing.T) { testPrivateAbove(t, sh) })
	t.Run("alive and running_pid", func(t *testing.T) { testAliveAndRunningPid(t, sh) })
}

// TestBusyboxFindTools: busybox-static's sh runs its own applet of a name
// before PATH's program (its ip has no netns, its setpriv cannot change
// the user), so find_tools takes the programs from PATH by their paths,
// and su where that setpriv is busybox's.
func TestBusyboxFindTools(t *testing.T) {
	sh, bin := busyboxShell(t)
	script := "err() { printf '%s\\n' \"$*\" >&2; }\n" + scriptFunc(t, "in_path") + scriptFunc(t, "find_tools") +
		`RELAY_NETNS=$1 RELAY_USER=$2; find_tools || exit 1; printf '%s|%s|%s\n' "${ip_-}" "${setpriv_-}" "$su_"`

	// The applet, not PATH's program, is what the shell runs for "ip".
	debian := t.TempDir()
	fake := func(name, body string) string {
		p := filepath.Join(debian, name)
		if err := os.WriteFile(p, []byte("#!"+busyboxBinary+" sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ip := fake("ip", "echo iproute2\n")
	fake("setpriv", "echo ' --reuid <uid>'\n") // util-linux's says it can
	if out, _ := withPath(sh("ip -V 2>&1"), debian+":"+bin).Output(); strings.Contains(string(out), "iproute2") {
		t.Fatalf("busybox sh ran PATH's ip (%q): it is not the build that runs its applets first", out)
	}

	for _, tt := range []struct {
		name, netns, user string
		debian            bool // PATH starts with the folder of the Debian stand-ins
		want, err         string
	}{
		{"nothing asked", "", "", false, "||", ""},
		{"PATH's ip", "relay", "", true, ip + "||", ""},
		{"busybox's ip", "relay", "", false, bin + "/ip||", ""},
		{"busybox's setpriv and su", "", "nobody", false, "|" + bin + "/setpriv|" + bin + "/su", ""},
		{"util-linux's setpriv", "", "nobody", true, "|" + debian + "/setpriv|", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := sh(script, tt.netns, tt.user)
			if tt.debian {
				withPath(c, debian+":"+bin)
			}
			out, err := c.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != tt.want {
				t.Errorf("find_tools: %v, %q; want %q", err, out, tt.want)
			}
		})
	}

	// No ip, or busybox's setpriv without su: refused, saying what to do.
	empty := t.TempDir()
	os.Symlink(busyboxBinary, filepath.Join(empty, "setpriv"))
	for _, tt := range []struct{ netns, user, want string }{
		{"relay", "", "RELAY_NETNS=relay: no ip (iproute2) in PATH"},
		{"", "nobody", "RELAY_USER=nobody: " + empty + "/setpriv cannot change the user (busybox's) and there is no su in PATH: install util-linux's setpriv"},
	} {
		if out, err := withPath(sh(script, tt.netns, tt.user), empty).CombinedOutput(); err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("find_tools with PATH of only setpriv: %v, %q; want refused with %q", err, out, tt.want)
		}
	}
}

// withPath sets c's PATH.
func withPath(c *exec.Cmd, path string) *exec.Cmd {
	for i, e := range c.Env {
		if strings.HasPrefix(e, "PATH=") {
			c.Env[i] = "PATH=" + path
		}
	}
	return c
}

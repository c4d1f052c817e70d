package invprogram

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// script writes an executable shell script into dir and returns its name.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}

func opts(dir string) Options {
	return Options{Name: "inv", Dir: dir, Timeout: 10 * time.Second, MaxOutput: 1 << 20, Allow: Allow{Typed: true}}
}

// The program runs as its argv, in the spec's folder, without a shell, with
// no standard input and relayctl's environment plus
// ANSIBLE_INVENTORY_UNPARSED_FAILED; what it prints on stderr comes back.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RELAYCTL_TEST_SECRET_ENV", "kept")
	t.Setenv("ANSIBLE_INVENTORY_UNPARSED_FAILED", "")
	os.Unsetenv("ANSIBLE_INVENTORY_UNPARSED_FAILED")
	script(t, dir, "inventory/print.sh", `printf '%s|' "$#" "$@" "$PWD" "$RELAYCTL_TEST_SECRET_ENV" "$ANSIBLE_INVENTORY_UNPARSED_FAILED"
cat   # stdin: nothing, at once
echo a warning >&2
`)
	res, err := Run(context.Background(), []string{"inventory/print.sh", "--list", "a b; rm -rf /", "$HOME"}, opts(dir))
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	want := "3|--list|a b; rm -rf /|$HOME|" + real + "|kept|True|"
	if string(res.Output) != want {
		t.Errorf("output %q, want %q", res.Output, want)
	}
	if res.Stderr != "a warning\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
	// An operator's own setting wins.
	t.Setenv("ANSIBLE_INVENTORY_UNPARSED_FAILED", "False")
	res, err = Run(context.Background(), []string{"inventory/print.sh"}, opts(dir))
	if err != nil || !strings.HasSuffix(string(res.Output), "|False|") {
		t.Errorf("got %q, %v", res.Output, err)
	}
}

// A program found in PATH, as a shell finds it; an absolute path as it is.
func TestRunFindsTheProgram(t *testing.T) {
	dir, bin := t.TempDir(), t.TempDir()
	script(t, bin, "relayctl-test-inventory", "echo from-path\n")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, prog := range []string{"relayctl-test-inventory", filepath.Join(bin, "relayctl-test-inventory")} {
		res, err := Run(context.Background(), []string{prog}, opts(dir))
		if err != nil || string(res.Output) != "from-path\n" {
			t.Errorf("%s: got %q, %v", prog, res.Output, err)
		}
	}
	_, err := Run(context.Background(), []string{"relayctl-no-such-inventory"}, opts(dir))
	if err == nil || !strings.Contains(err.Error(), "relayctl-no-such-inventory is not in PATH") {
		t.Errorf("got %v", err)
	}
}

// Each failure names the program and says what happened; a failure with
// stderr shows its end.
func TestRunFailures(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "fail.sh", "echo working >&2; echo 'ERROR! no credentials' >&2; exit 3\n")
	script(t, dir, "quiet.sh", "exit 1\n")
	script(t, dir, "killed.sh", "kill -9 $$\n")
	script(t, dir, "slow.sh", "sleep 30 & sleep 30\n")
	script(t, dir, "loud.sh", "head -c 3000 /dev/zero\n")
	script(t, dir, "daemon.sh", "echo '{}'; setsid sleep 20 & echo $! > daemon.pid\n") // out of its process group, holding stdout
	t.Cleanup(func() { killPIDFile(filepath.Join(dir, "daemon.pid")) })
	if err := os.WriteFile(filepath.Join(dir, "notexec.sh"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := opts(dir)
	short.Timeout, short.MaxOutput = 300*time.Millisecond, 1000
	for _, tt := range []struct {
		prog string
		o    Options
		want string
	}{
		{"./fail.sh", opts(dir), "inventory program inv exited with status 3; its stderr:\nworking\nERROR! no credentials"},
		{"./quiet.sh", opts(dir), "inventory program inv exited with status 1; it printed nothing on stderr"},
		{"./killed.sh", opts(dir), "inventory program inv was killed by signal killed"},
		{"./slow.sh", short, "inventory program inv did not finish within 300ms (hosts.inventory.timeout), and was killed"},
		{"./daemon.sh", opts(dir), "inventory program inv exited, but left a process behind that holds its output open"},
		{"./loud.sh", short, "inventory program inv printed more than 1000 bytes; relayctl reads at most 1000"},
		{"./notexec.sh", opts(dir), "is not an executable file"},
		{"./missing.sh", opts(dir), "missing.sh: no such file or directory"},
	} {
		t.Run(tt.prog, func(t *testing.T) {
			_, err := Run(context.Background(), []string{tt.prog}, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// killPIDFile ends the process whose id a test's script wrote.
func killPIDFile(file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Ctrl-C (the context cancelled) ends the program and what it started.
func TestRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "slow.sh", "sleep 30 & echo $! > child.pid; wait\n")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(dir, "child.pid")); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := Run(ctx, []string{"./slow.sh"}, opts(dir))
	if err == nil || !strings.Contains(err.Error(), "was stopped: relayctl was interrupted") {
		t.Fatalf("got %v", err)
	}
	pid, _ := os.ReadFile(filepath.Join(dir, "child.pid"))
	for range 100 { // the kill is sent; the kernel reaps the orphan soon after
		if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("the program's child %s outlived it", strings.TrimSpace(string(pid)))
}

// A program, or its folder, that someone else can change is not run:
// relayctl often runs as root, and they would run as root.
func TestRunRefusesWhatOthersCanChange(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "bin/inv.sh", "echo ok\n")
	prog := filepath.Join(dir, "bin", "inv.sh")
	if _, err := Run(context.Background(), []string{"bin/inv.sh"}, opts(dir)); err != nil {
		t.Fatalf("a program only its owner can change: %v", err)
	}
	for _, tt := range []struct {
		name string
		path string
		mode os.FileMode
		want string
	}{
		{"group-writable program", prog, 0o775, "bin/inv.sh is writable by others (mode 0775)"},
		{"world-writable program", prog, 0o757, "is writable by others (mode 0757)"},
		{"world-writable folder", filepath.Dir(prog), 0o777, "bin is writable by others (mode 0777)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := os.Stat(tt.path)
			if err := os.Chmod(tt.path, tt.mode); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(tt.path, st.Mode().Perm())
			_, err := Run(context.Background(), []string{"bin/inv.sh"}, opts(dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "whoever can change it would run as you") {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	// A symlink to a program in a folder others can write: the folder the
	// program really is in counts.
	shared := filepath.Join(dir, "shared")
	script(t, shared, "inv.sh", "echo ok\n")
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(shared, "inv.sh"), filepath.Join(dir, "link.sh")); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), []string{"./link.sh"}, opts(dir)); err == nil || !strings.Contains(err.Error(), "shared is writable by others") {
		t.Errorf("through a symlink: got %v", err)
	}
	// A sticky folder such as /tmp keeps others from replacing what is in it.
	sticky := filepath.Join(dir, "sticky")
	script(t, sticky, "inv.sh", "echo ok\n")
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), []string{"sticky/inv.sh"}, opts(dir)); err != nil {
		t.Errorf("in a sticky folder: %v", err)
	}
}

// A program owned by someone else is refused even when no one else can
// write it.
func TestRunRefusesAnotherUsersProgram(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	script(t, dir, "inv.sh", "echo ok\n")
	if err := os.Chown(filepath.Join(dir, "inv.sh"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), []string{"./inv.sh"}, opts(dir))
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, neither root nor you") {
		t.Fatalf("got %v", err)
	}
}

// Every file the program is given, and what Ansible reads beside it or
// in the folder the program runs in, is held to the program's rule:
// [sh, open.sh] must not run an open.sh anyone can write, which
// [open.sh] alone would not. Each case leaves the program itself safe.
func TestRunRefusesFilesOthersCanChange(t *testing.T) {
	dir, bin := t.TempDir(), t.TempDir()
	script(t, dir, "bin/print.sh", "echo ok\n")
	script(t, bin, "elsewhere.sh", "echo ok\n")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inv := write("inventory/hosts.sh", "echo '{}'\n")
	vars := write("inventory/group_vars/all.yml", "x: 1\n")
	tree := write("tree/sub/hosts.yml", "all: {}\n")
	cfg := write("ansible.cfg", "[defaults]\n")
	other := write("elsewhere/inv/hosts.sh", "echo '{}'\n")
	os.Symlink(filepath.Join(dir, "elsewhere", "inv"), filepath.Join(dir, "tree", "linked"))
	for _, tt := range []struct {
		name string
		argv []string
		open string // made writable by others
		want string
	}{
		{"a script given to sh", []string{"sh", "inventory/hosts.sh"}, inv, "a file it is given, " + inv + ","},
		{"an option's value", []string{"bin/print.sh", "--source=inventory/hosts.sh"}, inv, inv + " is writable by others (mode 0777)"},
		{"a short option's value", []string{"bin/print.sh", "-iinventory/hosts.sh"}, inv, inv + " is writable by others (mode 0777)"},
		{"a folder above a file given", []string{"sh", "inventory/hosts.sh"}, dir + "/inventory", dir + "/inventory is writable by others (mode 0777)"},
		{"a file in a folder given", []string{"bin/print.sh", "tree"}, tree, tree + " is writable by others"},
		{"a folder in a folder given", []string{"bin/print.sh", "tree"}, filepath.Dir(tree), filepath.Dir(tree) + " is writable by others"},
		{"a symlink out of a folder given", []string{"bin/print.sh", "tree"}, other, other + " is writable by others"},
		{"group_vars beside an inventory", []string{"sh", "inventory/hosts.sh"}, vars, "Ansible's group_vars/ beside " + inv},
		{"the folder it runs in's ansible.cfg", []string{"bin/print.sh"}, cfg, "the Ansible configuration " + cfg + ", which ansible-inventory reads,"},
		{"the folder it runs in", []string{filepath.Join(bin, "elsewhere.sh")}, dir, "the folder it runs in, " + dir + ","},
		{"a folder above the program's", []string{"bin/print.sh"}, dir, dir + " is writable by others (mode 0777)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := os.Stat(tt.open)
			if err := os.Chmod(tt.open, 0o777); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(tt.open, st.Mode().Perm())
			_, err := Run(context.Background(), tt.argv, opts(dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "would run as you (often root)") {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	// All of them safe: each runs. A word that names no file, a device and
	// a pipe are not files to check.
	for _, argv := range [][]string{{"sh", "inventory/hosts.sh"}, {"bin/print.sh", "tree", "--list", "/dev/null"}, {"bin/print.sh", "/dev/stdin"}} {
		if _, err := Run(context.Background(), argv, opts(dir)); err != nil {
			t.Errorf("%q: %v", argv, err)
		}
	}
	// $ANSIBLE_CONFIG is read as ./ansible.cfg is.
	env := write("env.cfg", "")
	os.Chmod(env, 0o666)
	t.Setenv("ANSIBLE_CONFIG", "env.cfg")
	if _, err := Run(context.Background(), []string{"bin/print.sh"}, opts(dir)); err == nil || !strings.Contains(err.Error(), "the Ansible configuration "+env) {
		t.Errorf("$ANSIBLE_CONFIG open to others: got %v", err)
	}
}

// Nothing runs unless the machine allows it: the operator's flag for one
// run, or the program listed in a file only root can change, by its path
// as found or as it resolves.
func TestRunOnlyWhatTheMachineAllows(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "inv.sh", "echo ok\n")
	prog := filepath.Join(dir, "inv.sh")
	os.Symlink(prog, filepath.Join(dir, "link.sh"))
	etc := filepath.Join(t.TempDir(), "etc")
	os.Mkdir(etc, 0o755)
	list := filepath.Join(etc, "inventory-programs")
	run := func(argv0 string, a Allow) error {
		o := opts(dir)
		o.Allow = a
		res, err := Run(context.Background(), []string{argv0}, o)
		if err == nil && string(res.Output) != "ok\n" {
			t.Errorf("%s ran, printing %q", argv0, res.Output)
		}
		return err
	}
	listed := func(body string) Allow {
		if err := os.WriteFile(list, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return Allow{List: list}
	}
	notAllowed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "give --allow-inventory-program for this run, or have root list "+prog+" in ") {
			t.Errorf("%s: got %v, want it not allowed, saying how to allow it", what, err)
		}
	}
	notAllowed("no flag and no list", run("./inv.sh", Allow{}))
	notAllowed("no flag, a list that does not exist", run("./inv.sh", Allow{List: list}))
	if err := run("./inv.sh", Allow{Typed: true}); err != nil {
		t.Errorf("with the flag: %v", err)
	}
	if err := run("./inv.sh", listed("# programs specs may run\n\n/usr/bin/true\n"+prog+"\n")); err != nil {
		t.Errorf("listed: %v", err)
	}
	if err := run("./link.sh", listed(prog+"\n")); err != nil {
		t.Errorf("a symlink to a listed program: %v", err)
	}
	notAllowed("another program listed", run("./inv.sh", listed("/usr/bin/true\n")))
	if err := run("./inv.sh", listed("inv.sh\n")); err == nil || !strings.Contains(err.Error(), list+":1: want the absolute path of a program") {
		t.Errorf("a relative path in the list: got %v", err)
	}
	if os.Geteuid() == 0 {
		a := listed(prog + "\n")
		os.Chown(list, 65534, 65534)
		if err := run("./inv.sh", a); err == nil || !strings.Contains(err.Error(), "is not root's alone ("+list+" belongs to uid 65534, not root)") {
			t.Errorf("a list that is not root's: got %v", err)
		}
		os.Chown(list, 0, 0)
		os.Chmod(etc, 0o777)
		if err := run("./inv.sh", a); err == nil || !strings.Contains(err.Error(), etc+" is writable by others") {
			t.Errorf("a list in a folder others can write: got %v", err)
		}
	}
}

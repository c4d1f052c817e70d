package main

// The shipped unit's config copy, on a lab host booted with a real systemd
// 252: the relay's own user owns the runtime folder the copy lands in, so it
// plants a symlink there before relayctl's reload switch and races many
// reloads, swapping each copy it sees for a symlink to a file of root's.
// That file stays root's and unchanged, and the reload still works.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// rootsSecret is a file of root's (0600) that the relay's user wants.
const rootsSecret = "/etc/ssh/relaylab_secret_key"

// asRelayUser runs the words after it as relayd's dynamic user, the owner
// of its runtime folder, with no privileges, as a relayd that was taken
// over would be.
const asRelayUser = `u=$(stat -c %u /run/relayd) && setpriv --reuid="$u" --regid="$u" --clear-groups --no-new-privs `

// raceReloads: the relay's user swaps every regular file it sees under the
// copy's names for a symlink to $1, in a loop, while root runs up to $2
// reloads; it stops at the first that changed $1's owner, mode or bytes.
const raceReloads = `target=$1 n=$2
` + asRelayUser + `sh -c 'while :; do
	for f in /run/relayd/relayd.env.new /run/relayd/relayd.env; do
		if [ -f "$f" ] && [ ! -L "$f" ]; then ln -sfn "$0" "$f"; fi
	done
done' "$target" &
racer=$!
sum=$(sha256sum <"$target")
i=0 failed=0
while [ "$i" -lt "$n" ]; do
	i=$((i + 1))
	systemctl reload relayd >/dev/null 2>&1 || failed=$((failed + 1))
	[ "$(stat -c %u:%g:%a "$target")" = 0:0:600 ] && [ "$(sha256sum <"$target")" = "$sum" ] || break
done
kill "$racer"
wait "$racer" 2>/dev/null
echo "reloads=$i failed=$failed"
`

func TestLabSystemdReloadGivesTheRelayUserNothingOfRoots(t *testing.T) {
	e := startStorePlayersLab(t, "1.9.1")
	spec, _ := os.ReadFile(e.spec)
	s := strings.Replace(string(spec), "    name: relayd\n", "    name: relayd\n    reload_keeps_socket: true\n", 1)
	if err := os.WriteFile(e.spec, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	h := e.lab.Hosts[0]
	sh := func(script string, args ...string) string {
		t.Helper()
		out, err := h.Exec(context.Background(), append([]string{"sh", "-c", script, "sh"}, args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	// The config root's alone, as the unit allows; a fresh runtime folder
	// (systemd makes it at each start) and a fresh secret of root's.
	fresh := func() string {
		secret := make([]byte, 32)
		rand.Read(secret)
		want := hex.EncodeToString(secret) + "\n"
		sh(`chmod 0600 /etc/relay/relayd.env && chown root:root /etc/relay/relayd.env && systemctl restart relayd &&
rm -f "$2" && umask 077 && printf '%s' "$1" >"$2"`, want, rootsSecret)
		return want
	}

	t.Run("planted before relayctl's reload", func(t *testing.T) {
		want := fresh()
		sh(asRelayUser + "ln -s " + rootsSecret + " /run/relayd/relayd.env.new")
		if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
			t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
		}
		if md, _ := os.ReadFile(e.plan + ".md"); !strings.Contains(string(md), "Switch: **reload**") {
			t.Fatalf("the plan does not reload:\n%s", md)
		}
		inode := e.status()["socket_inode"]
		if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
			t.Errorf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
		checkRootsSecret(t, h.Path, want)
		if st := e.status(); st["socket_inode"] != inode || st["so_rcvbuf_effective"] != float64(8388608) {
			t.Errorf("after the reload: socket_inode %v (was %v), so_rcvbuf_effective %v; want the same socket at 8388608", st["socket_inode"], inode, st["so_rcvbuf_effective"])
		}
		checkRelaysCopy(t, sh)
	})

	t.Run("raced over many reloads", func(t *testing.T) {
		const n = 200
		want := fresh()
		out := sh(raceReloads, rootsSecret, strconv.Itoa(n))
		t.Logf("%s", strings.TrimSpace(out))
		checkRootsSecret(t, h.Path, want)
		if m := regexp.MustCompile(`reloads=(\d+) `).FindStringSubmatch(out); m == nil || m[1] != strconv.Itoa(n) {
			t.Errorf("the race ended early (%q), want %d reloads with root's file intact", strings.TrimSpace(out), n)
		}
		// The racer gone, a reload works again and leaves the relay's copy.
		sh("systemctl reload relayd")
		checkRelaysCopy(t, sh)
	})
}

// checkRootsSecret checks, from the machine, that root's file is still
// root's, 0600, a regular file, holding want.
func checkRootsSecret(t *testing.T, path func(string) (string, error), want string) {
	t.Helper()
	p, err := path(rootsSecret)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || st.Uid != 0 || st.Gid != 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v uid %d gid %d, want root's regular file, 0600", rootsSecret, fi.Mode(), st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(p); string(b) != want {
		t.Errorf("%s holds %q, want root's %q", rootsSecret, b, want)
	}
}

// checkRelaysCopy checks that the copy relayd reads is a regular file of
// its own user's, 0600, with the config's bytes.
func checkRelaysCopy(t *testing.T, sh func(string, ...string) string) {
	t.Helper()
	got := sh(`stat -c '%u %a %F' /run/relayd/relayd.env; stat -c %u /run/relayd; cmp /etc/relay/relayd.env /run/relayd/relayd.env && echo same`)
	f := strings.Fields(got)
	if len(f) != 6 || f[0] != f[4] || f[1] != "600" || f[2]+" "+f[3] != "regular file" || f[5] != "same" {
		t.Errorf("the relay's copy: %q, want a regular file of the runtime folder's owner, 0600, as /etc/relay/relayd.env", got)
	}
}

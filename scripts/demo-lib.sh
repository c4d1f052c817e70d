# shellcheck shell=bash
# Shared by the scripts (sourced, from the repository root): how releases
# and tools are built, the machine's global sysctls and the lock the tests
# take around them, and the demos' start and end.

say() { printf '\n== %s\n' "$*"; }

# build_release VERSION OUT: relayd as `make build` and internal/lab build a
# release: static, reproducible (-trimpath -buildvcs=false), the version
# stamped with its marker, which relayctl reads from the bytes
# (relay/capability.VersionFlags).
build_release() {
	CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.Version=$1 -X main.versionMarker=relayd-version:$1" -o "$2" ./cmd/relayd
}

# build_tool PACKAGE OUT [VERSION]: relayctl, relaylab or another command of
# this repository, built the same way. relayctl embeds its host agent
# (agentbin/bin), so the agent of this tree is built first, as make agent
# builds it: a relayctl built over a stale or missing agent would ship it.
build_tool() {
	if [ "$1" = ./cmd/relayctl ]; then make -s agent >&2 || return 1; fi
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.Version=${3:-devel}" -o "$2" "$1"
}

# The machine's global sysctls. net.core.rmem_max and rmem_default are one
# value for the whole machine, whatever network namespace writes them, so
# every test and script that changes them takes KERNEL_LOCK first (the
# machine-wide sysctl lock: internal/kerneltest.Lock takes the same file)
# and puts back what it found.
KERNEL_LOCK=/tmp/relayctl-global-sysctl.lock
sysctl_path() { printf '/proc/sys/%s' "${1//.//}"; }
sysctl_read() { tr -d ' \t\n' <"$(sysctl_path "$1")"; }
# sysctl_set KEY VALUE: write, then read back (never trust an exit code).
sysctl_set() {
	printf '%s\n' "$2" >"$(sysctl_path "$1")"
	local got
	got=$(sysctl_read "$1")
	[ "$got" = "$2" ] || { echo "set $1: read back $got, want $2" >&2; return 1; }
}

# kernel_lock NAME [COMMAND]: take KERNEL_LOCK on the descriptor
# $kernel_lock_fd, held until the script exits (or kernel_unlock), waiting
# up to KERNEL_LOCK_WAIT seconds (default 900) and saying whom it waits
# for; then record this script (COMMAND, default $0) as the holder. Run
# what starts daemons through without_lock, so that none of them inherits
# the lock. RELAYCTL_KERNEL_LOCK_HELD=1 says the caller holds it already
# (a test that runs a script inside internal/kerneltest.Lock).
kernel_lock() {
	[ "${RELAYCTL_KERNEL_LOCK_HELD:-}" = 1 ] && return 0
	kernel_lock_open "$1" || exit 1
	kernel_lock_take "$kernel_lock_fd" "$1" "${KERNEL_LOCK_WAIT:-900}" || exit 1
	kernel_lock_record "$kernel_lock_fd" "${2:-$0}"
}

# kernel_lock_open NAME: open KERNEL_LOCK read-only on $kernel_lock_fd
# (flock needs no more). The file is in /tmp, which anyone can write, and
# root writes its record into it: it is created with O_EXCL (set -C), so
# never through a symlink, and must be a regular file of root's (or ours),
# the same file as the descriptor's.
kernel_lock_open() {
	[ -e "$KERNEL_LOCK" ] || [ -L "$KERNEL_LOCK" ] || (set -C && : >"$KERNEL_LOCK") 2>/dev/null || true
	if [ -L "$KERNEL_LOCK" ]; then
		echo "$1: error: $KERNEL_LOCK is a symlink: remove it" >&2
		return 1
	fi
	exec {kernel_lock_fd}<"$KERNEL_LOCK" || return 1
	local on_fd on_path owner links type
	on_fd=$(stat -L -c '%d:%i %u %h %F' "/proc/self/fd/$kernel_lock_fd") || return 1
	on_path=$(stat -c '%d:%i %u %h %F' "$KERNEL_LOCK") || return 1
	read -r _ owner links type <<<"$on_fd"
	if [ "$on_fd" = "$on_path" ] && [ "$links" = 1 ] && [ "${type#regular}" != "$type" ] &&
		{ [ "$owner" = 0 ] || [ "$owner" = "$(id -u)" ]; }; then
		return 0
	fi
	echo "$1: error: $KERNEL_LOCK is not a regular file of root's with one link ($on_path): remove it" >&2
	return 1
}

# kernel_lock_take FD NAME WAIT: flock FD, waiting up to WAIT seconds;
# meanwhile say whom for, again whenever the holder changes.
kernel_lock_take() {
	local fd=$1 name=$2 wait=$3 waited=0 shown='' holder
	flock -n "$fd" && return 0
	while :; do
		holder=$(kernel_lock_holder "$fd")
		# A holder records itself just after it takes the lock: give it a
		# second before saying it cannot be named.
		if [ "$holder" != "$shown" ] && { [ "$waited" -gt 0 ] || [ "${holder#an unknown}" = "$holder" ]; }; then
			echo "$name: waiting for the machine-wide sysctl lock held by $holder" >&2
			shown=$holder
		fi
		if [ "$waited" -ge "$wait" ]; then
			echo "$name: error: could not take $KERNEL_LOCK in ${wait}s" >&2
			return 1
		fi
		flock -w 1 "$fd" && return 0
		waited=$((waited + 1))
	done
}

# kernel_lock_holder FD: who holds the lock, from its record (the line
# internal/kerneltest.Holder reads and writes), if the process it names
# still runs.
kernel_lock_holder() {
	local rec pid user since cmd st
	rec=$(head -c 1024 "/proc/self/fd/$1" 2>/dev/null | head -n 1)
	read -r pid user since cmd <<<"$rec" || true
	pid=${pid#pid=} user=${user#user=} since=${since#since=} cmd=${cmd#command=}
	case $pid in '' | *[!0-9]*) pid=0 ;; esac
	st=$(sed -n 's/^.*) \(.\).*$/\1/p' "/proc/$pid/stat" 2>/dev/null) || st=''
	case $st in
	'' | Z | X | x) printf 'an unknown process (none recorded in %s)' "$KERNEL_LOCK" ;;
	*) printf '%s (pid %s, user %s) since %s' "${cmd//[[:cntrl:]]/ }" "$pid" "${user//[[:cntrl:]]/ }" "${since//[[:cntrl:]]/ }" ;;
	esac
}

# kernel_lock_record FD COMMAND: write this process as the holder, through
# the descriptor's own file (/proc/self/fd, never the path again).
kernel_lock_record() {
	local cmd=${2//[[:cntrl:]]/ }
	printf 'pid=%s user=%s since=%s command=%s\n' "$BASHPID" "$(id -un)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${cmd:0:300}" \
		2>/dev/null >"/proc/self/fd/$1" || true
}

# kernel_lock_clear FD: clear the record, before letting the lock go.
kernel_lock_clear() { : 2>/dev/null >"/proc/self/fd/$1" || true; }

# kernel_lock_clear_after PID: in the background, once PID (a holder that
# cannot clear its own record: a program this script exec'd) has let the
# lock go, take it, clear the record if it still names PID (no holder
# since wrote its own), and let it go. It closes its copy of the lock's
# descriptor first: holding it would hold the lock.
kernel_lock_clear_after() {
	local pid=$1 fd rec
	exec {kernel_lock_fd}>&-
	unset kernel_lock_fd
	kernel_lock_open "lab" || return 0
	fd=$kernel_lock_fd
	flock "$fd" || return 0
	rec=$(head -c 1024 "/proc/self/fd/$fd" 2>/dev/null | head -n 1) || true
	case $rec in "pid=$pid "*) kernel_lock_clear "$fd" ;; esac
	exec {fd}>&-
}

# demo_start NAME DIR: check root, make DIR afresh, build relayd 1.7.0 into
# it, take the kernel lock, and put the machine on the incident's
# 212,992-byte rmem_max and rmem_default, saying so; on exit the lab in
# DIR/lab is stopped and the values found are put back (then the lock is
# let go).
demo_start() {
	demo_name=$1
	[ "$(id -u)" = 0 ] || { echo "$demo_name: needs root (it starts sshd and changes net.core.rmem_max)" >&2; exit 1; }
	rm -rf "$2" && mkdir -p "$2"
	dir=$(cd "$2" && pwd)
	build_release 1.7.0 "$dir/relayd-1.7.0"
	kernel_lock "$demo_name"
	saved_max=$(sysctl_read net.core.rmem_max)
	saved_default=$(sysctl_read net.core.rmem_default)
	trap demo_cleanup EXIT
	say "Global kernel values this demo changes (restored at the end)"
	echo "net.core.rmem_max:     $saved_max -> 212992"
	echo "net.core.rmem_default: $saved_default -> 212992"
	sysctl_set net.core.rmem_max 212992
	sysctl_set net.core.rmem_default 212992
	ssh_flags=(--ssh-config "$dir/lab/ssh_config" --known-hosts "$dir/lab/known_hosts" --identity "$dir/lab/id_ed25519")
}

# without_lock CMD...: CMD without the kernel lock's descriptor, for what
# starts daemons (the lab's sshds and relays outlive the script).
without_lock() {
	if [ -n "${kernel_lock_fd:-}" ]; then
		"$@" {kernel_lock_fd}>&-
	else
		"$@"
	fi
}

# kernel_unlock: let the kernel lock go before the script ends.
kernel_unlock() {
	if [ -n "${kernel_lock_fd:-}" ]; then
		kernel_lock_clear "$kernel_lock_fd"
		exec {kernel_lock_fd}>&-
		unset kernel_lock_fd
	fi
}

# lab_up ARGS...: relaylab up, without the kernel lock's descriptor.
lab_up() { without_lock ./bin/relaylab up "$@"; }

demo_cleanup() {
	./bin/relaylab down --dir "$dir/lab" >/dev/null 2>&1 || true
	sysctl_set net.core.rmem_max "$saved_max" || true
	sysctl_set net.core.rmem_default "$saved_default" || true
	echo
	echo "$demo_name: restored net.core.rmem_max=$saved_max net.core.rmem_default=$saved_default; lab stopped (make lab starts one that stays up: README.md, 'A ten-minute walkthrough')"
}
# write_fix_spec FILE NAME [systemd]: the incident's fix for lab-1, for the
# generic service manager, or for relayd.service under systemd.
write_fix_spec() {
	if [ "${3:-}" = systemd ]; then
		service="    manager: systemd
    name: relayd"
	else
		service="    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
    log: /opt/relay/log/relayd.log"
	fi
	cat >"$1" <<SPEC
# The incident's fix: rmem_max plus a relay that asks for 4 MiB, one window.
name: $2
hosts:
  - lab-1
sysctl:
  net.core.rmem_max: 8388608
relay:
  port: 7788
  so_rcvbuf: 4194304
  release:
    version: 1.8.0
    artifact: ../bin/relayd
  service:
$service
SPEC
}

# plan_changes SPEC PLAN: relayctl plan, which must find changes (exit 2).
plan_changes() {
	local code=0
	./bin/relayctl plan "$1" --out "$2" --detailed-exitcode "${ssh_flags[@]}" || code=$?
	[ "$code" = 2 ] || { echo "$demo_name: plan exited $code, want 2 (changes)" >&2; exit 1; }
}

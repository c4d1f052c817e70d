# shellcheck shell=bash
# Shared by demo.sh and demo-bench.sh (sourced, from the repository root).
#
# demo_start NAME DIR: check root, make DIR afresh, build relayd 1.7.0 into
# it, and put the machine on the incident's 212,992-byte rmem_max and
# rmem_default, saying so; on exit the lab in DIR/lab is stopped and the
# values found are put back. rmem_max is global to the machine (DESIGN.md).

say() { printf '\n== %s\n' "$*"; }

demo_start() {
	demo_name=$1
	[ "$(id -u)" = 0 ] || { echo "$demo_name: needs root (it starts sshd and changes net.core.rmem_max)" >&2; exit 1; }
	rm -rf "$2" && mkdir -p "$2"
	dir=$(cd "$2" && pwd)
	go build -ldflags "-X main.Version=1.7.0" -o "$dir/relayd-1.7.0" ./cmd/relayd
	saved_max=$(cat /proc/sys/net/core/rmem_max)
	saved_default=$(cat /proc/sys/net/core/rmem_default)
	trap demo_cleanup EXIT
	say "Global kernel values this demo changes (restored at the end)"
	echo "net.core.rmem_max:     $saved_max -> 212992"
	echo "net.core.rmem_default: $saved_default -> 212992"
	echo 212992 >/proc/sys/net/core/rmem_max
	echo 212992 >/proc/sys/net/core/rmem_default
	ssh_flags=(--ssh-config "$dir/lab/ssh_config" --known-hosts "$dir/lab/known_hosts" --identity "$dir/lab/id_ed25519")
}

demo_cleanup() {
	./bin/relaylab down --dir "$dir/lab" >/dev/null 2>&1 || true
	echo "$saved_max" >/proc/sys/net/core/rmem_max
	echo "$saved_default" >/proc/sys/net/core/rmem_default
	echo
	echo "$demo_name: restored net.core.rmem_max=$saved_max net.core.rmem_default=$saved_default; lab stopped"
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
    pid_file: /opt/relay/run/relayd.pid"
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
	./bin/relayctl plan "$1" -out "$2" "${ssh_flags[@]}" || code=$?
	[ "$code" = 2 ] || { echo "$demo_name: plan exited $code, want 2 (changes)" >&2; exit 1; }
}

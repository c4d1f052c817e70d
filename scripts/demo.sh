#!/usr/bin/env bash
# make demo: the incident's fix, end to end, on one local lab host.
#
# A lab host is a real OpenSSH sshd on 127.0.0.2:2222 with private
# /etc/sysctl.d, /opt/relay, /etc/relay and /var/lib/relayctl, running the
# reference relay relayd 1.7.0 (which does not ask for a buffer) in a
# network namespace of its own. The kernel is this machine's: rmem_max is
# global, so the demo sets net.core.rmem_max and rmem_default to the
# 212,992-byte defaults of the incident first, and puts back what it found
# when it ends. Needs root; installs openssh-server if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "demo: needs root (it starts sshd and changes net.core.rmem_max)" >&2; exit 1; }
if ! command -v sshd >/dev/null && [ ! -x /usr/sbin/sshd ]; then
	echo "demo: installing openssh-server"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
fi

dir=${DEMO_DIR:-demo}
rm -rf "$dir" && mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
go build -ldflags "-X main.Version=1.7.0" -o "$dir/relayd-1.7.0" ./cmd/relayd

say() { printf '\n== %s\n' "$*"; }

saved_max=$(cat /proc/sys/net/core/rmem_max)
saved_default=$(cat /proc/sys/net/core/rmem_default)
cleanup() {
	./bin/relaylab down --dir "$dir/lab" >/dev/null 2>&1 || true
	echo "$saved_max" >/proc/sys/net/core/rmem_max
	echo "$saved_default" >/proc/sys/net/core/rmem_default
	echo
	echo "demo: restored net.core.rmem_max=$saved_max net.core.rmem_default=$saved_default; lab stopped"
}
trap cleanup EXIT

say "Global kernel values this demo changes (restored at the end)"
echo "net.core.rmem_max:     $saved_max -> 212992"
echo "net.core.rmem_default: $saved_default -> 212992"
echo 212992 >/proc/sys/net/core/rmem_max
echo 212992 >/proc/sys/net/core/rmem_default

say "Start one lab host with relayd 1.7.0"
./bin/relaylab up --dir "$dir/lab" --hosts 1 --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0
ssh_flags=(--ssh-config "$dir/lab/ssh_config" --known-hosts "$dir/lab/known_hosts" --identity "$dir/lab/id_ed25519")

socket() {
	./bin/relaylab exec --dir "$dir/lab" lab-1 -- sh -c \
		'nsenter -t "$(/opt/relay/bin/relay-service pid)" -n ss -H -O -u -l -n -m "sport = :7788"'
}
say "The relay socket, read from the kernel in the relay's network namespace"
socket

cat >"$dir/demo.yaml" <<EOF
# The incident's fix: rmem_max plus a relay that asks for 4 MiB, one window.
name: demo-rcvbuf
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
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid: [/opt/relay/bin/relay-service, pid]
EOF
say "The spec ($dir/demo.yaml)"
cat "$dir/demo.yaml"

say "relayctl plan"
set +e
./bin/relayctl plan "$dir/demo.yaml" -out "$dir/demo.plan" "${ssh_flags[@]}"
code=$?
set -e
[ "$code" = 2 ] || { echo "demo: plan exited $code, want 2 (changes)"; exit 1; }

say "The review ($dir/demo.plan.md)"
cat "$dir/demo.plan.md"

say "relayctl apply"
./bin/relayctl apply "$dir/demo.plan" "${ssh_flags[@]}"

say "The relay socket after the window"
socket

say "relayctl verify"
./bin/relayctl verify "$dir/demo.plan" "${ssh_flags[@]}"

say "The receipt ($dir/demo.plan.receipt.md)"
cat "$dir/demo.plan.receipt.md"

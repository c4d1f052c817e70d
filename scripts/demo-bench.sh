#!/usr/bin/env bash
# make demo-bench: the whole incident on one lab host.
#
#   1. relayd 1.7.0 (it never asks for a buffer) on the kernel's 212,992-byte
#      defaults; a ramp of lobbies of eight finds the knee, and the four drop
#      counters (ss d, /proc/net/udp drops, RcvbufErrors, the relay's
#      rx_drops) are compared;
#   2. relayctl plan + apply ship net.core.rmem_max with relayd 1.8.0 asking
#      for 4 MiB, in one window, verified by read-back;
#   3. the same ramp again.
#
# The relay runs in the machine's network namespace here (the bench sends
# to it on 127.0.0.1), so RcvbufErrors counts every UDP socket of that
# namespace: the bench marks a step invalid when its own sockets drop, so in
# valid steps the delta is the relay's. Needs root; restores
# net.core.rmem_max and rmem_default at the end. RAMP and STEP override the
# ramp (default 40:480:40, 3s a step).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo-bench: needs root" >&2; exit 1; }
RAMP=${RAMP:-40:480:40}
STEP=${STEP:-3s}

dir=${DEMO_DIR:-demo-bench}
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
	echo "demo-bench: restored net.core.rmem_max=$saved_max net.core.rmem_default=$saved_default; lab stopped"
}
trap cleanup EXIT

say "Global kernel values this demo changes (restored at the end)"
echo "net.core.rmem_max:     $saved_max -> 212992"
echo "net.core.rmem_default: $saved_default -> 212992"
echo 212992 >/proc/sys/net/core/rmem_max
echo 212992 >/proc/sys/net/core/rmem_default

say "One lab host, relayd 1.7.0 in the machine's network namespace"
./bin/relaylab up --dir "$dir/lab" --hosts 1 --no-relay-netns --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0
ssh_flags=(--ssh-config "$dir/lab/ssh_config" --known-hosts "$dir/lab/known_hosts" --identity "$dir/lab/id_ed25519")

say "Before: the relay socket"
./bin/relaylab exec --dir "$dir/lab" lab-1 -- ss -H -O -u -l -n -m 'sport = :7788'
say "Before: ramp $RAMP players, lobbies of 8, 60 Hz, 200-byte datagrams"
./bin/relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 \
	--players "$RAMP" --step-duration "$STEP" --lobby-base 0 \
	--ssh lab-1 --relay-pid "$(./bin/relaylab exec --dir "$dir/lab" lab-1 -- /opt/relay/bin/relay-service pid)" "${ssh_flags[@]}" \
	--plot "$dir/before.svg" | tee "$dir/before.txt"

cat >"$dir/fix.yaml" <<EOF
name: demo-bench-rcvbuf
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
say "relayctl plan"
set +e
./bin/relayctl plan "$dir/fix.yaml" -out "$dir/fix.plan" "${ssh_flags[@]}"
code=$?
set -e
[ "$code" = 2 ] || { echo "demo-bench: plan exited $code, want 2"; exit 1; }
say "relayctl apply"
./bin/relayctl apply "$dir/fix.plan" "${ssh_flags[@]}" 2>/dev/null

say "After: the relay socket"
./bin/relaylab exec --dir "$dir/lab" lab-1 -- ss -H -O -u -l -n -m 'sport = :7788'
say "After: the same ramp"
./bin/relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 \
	--players "$RAMP" --step-duration "$STEP" --lobby-base 0 \
	--ssh lab-1 --relay-pid "$(./bin/relaylab exec --dir "$dir/lab" lab-1 -- /opt/relay/bin/relay-service pid)" "${ssh_flags[@]}" \
	--plot "$dir/after.svg" | tee "$dir/after.txt"

say "Charts: $dir/before.svg and $dir/after.svg; tables: $dir/before.txt and $dir/after.txt"

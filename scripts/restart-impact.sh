#!/usr/bin/env bash
# What a relay restart costs the players, and what a handoff costs: one lab
# host, relayd in its own network namespace, the bench beside it; a plain
# restart (relay-service restart) and a handoff (relay-service handoff) in
# the middle of a bench step, and the windows relayctl apply opens (a plain
# restart, a drain gate forced at its deadline, a drain gate that waits for
# the players to leave, a handoff; relayctl over SSH to the host's sshd),
# interleaved with a baseline, RUNS rounds.
# Figures: docs/restart.md. Needs root (lab). Sets net.core.rmem_max to
# 8388608 for the run (global to the machine: it takes the lock the tests
# take, internal/kerneltest, and puts the value back), so each release's
# buffer (2 MiB, then 4 MiB) is granted and shows in rb. The bench, relay-service
# and relayd run at nice -10, as the bench tests do, so other work on a
# shared machine disturbs them less. Flags after the script's name go to
# internal/cmd/restartimpact (e.g. --runs 5 --players 64 --step 12s --at 5s --json,
# --modes none,apply-handoff).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
[ "$(id -u)" = 0 ] || { echo "restart-impact: needs root (it starts a lab host)" >&2; exit 1; }
./scripts/lab-deps.sh
dir=$(mktemp -d /tmp/restart-impact.XXXXXX)
cleanup() {
	"$dir/relaylab" down --dir "$dir/lab" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
kernel_lock restart-impact
saved_max=$(cat /proc/sys/net/core/rmem_max)
cleanup() {
	"$dir/relaylab" down --dir "$dir/lab" >/dev/null 2>&1 || true
	echo "$saved_max" >/proc/sys/net/core/rmem_max
	rm -rf "$dir"
}
echo 8388608 >/proc/sys/net/core/rmem_max
for v in 1.9.0 1.9.1; do
	build_release "$v" "$dir/relayd-$v"
done
build_tool ./internal/cmd/relaylab "$dir/relaylab"
build_tool ./internal/cmd/restartimpact "$dir/restartimpact"
build_tool ./cmd/relayctl "$dir/relayctl"
up=$(without_lock "$dir/relaylab" up --dir "$dir/lab" --hosts 1)
ns=$(printf '%s\n' "$up" | sed -n 's/^lab-1 .* relay_netns=\([^ ]*\).*$/\1/p')
[ -n "$ns" ] || { echo "restart-impact: no relay namespace in: $up" >&2; exit 1; }
echo "restart-impact: kernel $(uname -r), rmem_max $(cat /proc/sys/net/core/rmem_max), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
nice -n -10 ip netns exec "$ns" "$dir/restartimpact" --lab "$dir/lab" --host lab-1 \
	--release "1.9.0=$dir/relayd-1.9.0" --release "1.9.1=$dir/relayd-1.9.1" --relayctl "$dir/relayctl" "$@"
echo "restart-impact: load at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

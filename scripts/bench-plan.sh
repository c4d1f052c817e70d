#!/usr/bin/env bash
# How long `relayctl plan` takes against 1 and 20 lab hosts (real sshd,
# relayd running): median of RUNS (default 5) per fleet size. Read-only on
# the hosts; needs root for the lab.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
RUNS=${RUNS:-5}
SIZES=${SIZES:-"1 20"}
make -s build
work=$(mktemp -d /tmp/bench-plan.XXXXXX)
lab=
trap '[ -n "$lab" ] && ./bin/relaylab down --dir "$lab" >/dev/null 2>&1; rm -rf "$work"' EXIT
build_release 1.7.0 "$work/relayd-1.7.0"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

printf '%-6s %-10s %s\n' hosts median_ms runs_ms
for n in $SIZES; do
	[ -n "$lab" ] && ./bin/relaylab down --dir "$lab" >/dev/null
	lab=$work/lab-$n
	./bin/relaylab up --dir "$lab" --hosts "$n" --relayd "$work/relayd-1.7.0" --relay-version 1.7.0 >/dev/null 2>&1
	{
		echo "name: bench-plan"
		echo "hosts:"
		for i in $(seq 1 "$n"); do echo "  - lab-$i"; done
		cat <<YAML
sysctl:
  net.core.rmem_max: 8388608
relay:
  so_rcvbuf: 4194304
  release: {version: 1.8.0, artifact: $PWD/bin/relayd}
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
YAML
	} >"$work/spec.yaml"
	times=()
	for _ in $(seq 1 "$RUNS"); do
		t0=$(date +%s%N)
		code=0
		./bin/relayctl plan "$work/spec.yaml" --out "$work/p.plan" --detailed-exitcode --parallel "$n" \
			--ssh-config "$lab/ssh_config" --known-hosts "$lab/known_hosts" --identity "$lab/id_ed25519" >/dev/null 2>&1 || code=$?
		t1=$(date +%s%N)
		[ "$code" = 2 ] || { echo "plan exited $code (want 2)" >&2; exit 1; }
		times+=($(((t1 - t0) / 1000000)))
	done
	printf '%-6s %-10s %s\n' "$n" "$(printf '%s\n' "${times[@]}" | median)" "${times[*]}"
done
echo "machine: $(nproc) cores, kernel $(uname -r)"

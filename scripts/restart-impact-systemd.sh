#!/usr/bin/env bash
# What a restart costs the players when the relay is a systemd unit: one lab
# host booted with a real systemd, relayd as relay/dist's relayd.service in
# its network namespace (/run/netns/relay), and `relayctl bench` beside it in
# that namespace: 64 players in lobbies of 8 at 60 Hz for a 12 s step, and the
# next release switched in 5 s into the step. Two modes:
#
#   MODE=apply (the default): `relayctl apply` of the next release, over SSH
#     to the host's sshd as an operator would. relayctl plans a plain restart
#     (`systemctl restart relayd`) there.
#   MODE=store: `systemctl restart relayd` on the host, three switches per run
#     in turn: "unaware", a plain restart of a relayd that does not know
#     systemd's fd store (built from the commit before relay/fdstore) to the
#     next such release; "first", from it to a store-aware release, whose
#     first start binds a socket of its own; "kept", from that release to the
#     next store-aware one asking twice the SO_RCVBUF, which takes the socket
#     and the lobbies from the store. Between runs the unit is stopped (which
#     empties the store) and the unaware release started again.
#
# Per run it prints the bench's own accounting (deliveries planned and
# lost, per direction), the lobbies and players the switch cut, the ICMP
# errors the players' sockets got, and the switch's own figures; then the
# medians. Figures: docs/restart.md.
#
#   sudo scripts/restart-impact-systemd.sh          # RUNS=5
#   sudo MODE=store scripts/restart-impact-systemd.sh
#   sudo RUNS=3 PLAYERS=64 STEP=12s AT=5 scripts/restart-impact-systemd.sh
#   sudo KEEP=1 MODE=store scripts/restart-impact-systemd.sh   # keep each run's bench JSON and journal
#
# Needs root (the lab). Sets net.core.rmem_max to 8388608 for the run (global
# to the machine: it takes the lock the tests take and puts the value back).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
[ "$(id -u)" = 0 ] || { echo "restart-impact-systemd: needs root (it starts a lab host)" >&2; exit 1; }
RUNS=${RUNS:-5}
PLAYERS=${PLAYERS:-64}
STEP=${STEP:-12s}
AT=${AT:-5}
MODE=${MODE:-apply}
case $MODE in apply | store) ;; *) echo "restart-impact-systemd: MODE=$MODE: want apply or store" >&2; exit 2 ;; esac
./scripts/lab-deps.sh
# Under /var/tmp, not /tmp: the lab host sees the machine's tree through an
# overlay, but its /tmp is its own.
dir=$(mktemp -d /var/tmp/restart-impact-systemd.XXXXXX)
kernel_lock restart-impact-systemd
saved_max=$(cat /proc/sys/net/core/rmem_max)
cleanup() {
	"$dir/relaylab" down --dir "$dir/lab" >/dev/null 2>&1 || true
	echo "$saved_max" >/proc/sys/net/core/rmem_max
	if [ -n "${KEEP:-}" ]; then echo "restart-impact-systemd: kept $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT
echo 8388608 >/proc/sys/net/core/rmem_max

for i in $(seq 0 "$RUNS"); do
	build_release "1.8.$i" "$dir/relayd-1.8.$i"
done
if [ "$MODE" = store ]; then
	# shellcheck source=scripts/restart-impact-store.sh
	. ./scripts/restart-impact-store.sh
	store_build # before the host boots: it sees the machine's files as they were then
fi
build_tool ./internal/cmd/relaylab "$dir/relaylab"
build_tool ./cmd/relayctl "$dir/relayctl"
without_lock "$dir/relaylab" up --dir "$dir/lab" --systemd 1 --relayd "$dir/relayd-1.8.0" --relay-version 1.8.0 >&2
ssh_flags=(--ssh-config "$dir/lab/ssh_config" --known-hosts "$dir/lab/known_hosts" --identity "$dir/lab/id_ed25519")
# Players silent for 2 s are forgotten (relayd's default is 30 s), so a run's
# lobbies are gone before the next run starts and "players cut" counts only
# the run's own 64; relayctl keeps the key it does not manage.
"$dir/relaylab" exec --dir "$dir/lab" lab-1 -- sh -c \
	'echo RELAYD_IDLE_TIMEOUT=2s >>/etc/relay/relayd.env && systemctl restart relayd'
echo "restart-impact-systemd: kernel $(uname -r), rmem_max $(cat /proc/sys/net/core/rmem_max), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ "$MODE" = store ]; then
	store_mode
	exit 0
fi

printf 'run\tplanned\tlost\tlost_in\tlost_out\tlobbies_cut\tplayers_cut\ticmp_errors\twindow_ms\n' >"$dir/runs.tsv"
for i in $(seq 1 "$RUNS"); do
	# Each run ships the next release, with another buffer so rb changes too.
	cat >"$dir/spec.yaml" <<SPEC
name: impact-systemd
hosts:
  - lab-1
sysctl:
  net.core.rmem_max: 8388608
relay:
  port: 7788
  so_rcvbuf: $((2097152 + 65536 * i))
  release:
    version: 1.8.$i
    artifact: relayd-1.8.$i
  service:
    manager: systemd
    name: relayd
SPEC
	sleep 3 # the last run's players expire
	code=0
	"$dir/relayctl" plan "$dir/spec.yaml" --out "$dir/run.plan" --detailed-exitcode "${ssh_flags[@]}" >/dev/null || code=$?
	[ "$code" = 2 ] || { echo "restart-impact-systemd: run $i: plan exited $code, want 2" >&2; exit 1; }
	"$dir/relaylab" exec --dir "$dir/lab" lab-1 -- nice -n -10 ip netns exec relay "$dir/relayctl" bench \
		--relay 127.0.0.1:7788 --control 127.0.0.1:7789 --players "$PLAYERS" --step-duration "$STEP" \
		--interval 250ms --calibrate 0 --lobby-base $((i * 100)) --json >"$dir/bench-$i.json" 2>"$dir/bench-$i.err" &
	bench=$!
	sleep "$AT"
	"$dir/relayctl" apply "$dir/run.plan" --json "${ssh_flags[@]}" >"$dir/receipt-$i.json" 2>"$dir/apply-$i.err" ||
		{ echo "restart-impact-systemd: run $i: apply failed:" >&2; cat "$dir/apply-$i.err" >&2; exit 1; }
	wait "$bench" || true
	python3 - "$i" "$dir/bench-$i.json" "$dir/receipt-$i.json" >>"$dir/runs.tsv" <<'PY'
import json, sys
run, bench, receipt = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
s = bench["steps"][0]
r = s.get("restarts") or []
if len(r) != 1:
    sys.exit(f"run {run}: the bench saw {len(r)} restarts, want 1")
h = receipt["hosts"][0]
print("\t".join(str(x) for x in (run, s["planned_deliveries"], s["loss"], s["bench_lost_in"], s["bench_lost_out"],
      r[0]["lobbies_cut"], r[0]["players_cut"], s["icmp_errors"], h["window_ms"])))
PY
	echo "restart-impact-systemd: run $i done" >&2
done
echo "restart-impact-systemd: load at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo "systemd manager (systemctl restart relayd), $PLAYERS players, lobbies of 8, 60 Hz, apply $AT s into a $STEP step; kernel $(uname -r)"
column -t -s $'\t' "$dir/runs.tsv"
python3 - "$dir/runs.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("medians: " + ", ".join(f"{k} {statistics.median(float(r[k]) for r in rows):g}" for k in rows[0] if k != "run"))
PY

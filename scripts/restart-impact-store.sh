# shellcheck shell=bash
# shellcheck disable=SC2154 # dir, RUNS, PLAYERS, STEP, AT: set by restart-impact-systemd.sh
# MODE=store of scripts/restart-impact-systemd.sh, which sources this file
# (bash; it uses that script's dir, RUNS, PLAYERS, STEP and AT). Per run,
# three `systemctl restart relayd` under the bench's load, each with the
# release and SO_RCVBUF it switches to:
#
#   unaware  store-unaware 1 MiB -> store-unaware 2 MiB   a plain restart
#   first    store-unaware 2 MiB -> store-aware 1 MiB     its first start binds
#   kept     store-aware 1 MiB   -> store-aware 4 MiB     socket and lobbies kept
#
# then `systemctl stop` (which empties the store), the store-unaware release
# and `systemctl start`, for the next run. rmem_max is 8 MiB, so each rb is
# twice what is asked.

# store_build builds the two releases: store-aware from this tree, and
# store-unaware from the commit before relay/fdstore was added.
store_build() {
	local added
	added=$(git log --diff-filter=A --format=%H -- relay/fdstore/fdstore.go | tail -n 1)
	[ -n "$added" ] || { echo "restart-impact-systemd: no commit adds relay/fdstore: cannot build a store-unaware release" >&2; exit 1; }
	mkdir -p "$dir/unaware-src"
	git archive "$added^" | tar -x -C "$dir/unaware-src"
	(cd "$dir/unaware-src" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.Version=1.7.0" -o "$dir/relayd-unaware" ./cmd/relayd)
	build_release 1.9.0 "$dir/relayd-aware"
	if "$dir/relayd-unaware" --capabilities | grep -q fdstore= || ! "$dir/relayd-aware" --capabilities | grep -q fdstore=systemd/1; then
		echo "restart-impact-systemd: the releases' capability markers are not store-unaware and store-aware" >&2
		exit 1
	fi
	echo "restart-impact-systemd: store-unaware release from ${added:0:12}^, store-aware from this tree" >&2
}

host() { "$dir/relaylab" exec --dir "$dir/lab" lab-1 -- "$@"; }

# stage VERSION BINARY RCVBUF: install BINARY as release VERSION asking
# RCVBUF and point /opt/relay/current at it. The running relayd read its
# config at start and keeps running as it is.
stage() {
	# shellcheck disable=SC2016 # expanded by the host's shell
	host sh -c 'install -D -m 0755 "$2" "/opt/relay/releases/$1/relayd" &&
		sed -i "/^RELAYD_SO_RCVBUF=/d" /etc/relay/relayd.env && echo "RELAYD_SO_RCVBUF=$3" >>/etc/relay/relayd.env &&
		ln -sfn "releases/$1" /opt/relay/current' sh "$1" "$2" "$3"
}

relay_status() {
	host ip netns exec relay bash -c 'exec 3<>/dev/tcp/127.0.0.1/7789 && printf "GET /status HTTP/1.0\r\n\r\n" >&3 && cat <&3' |
		python3 -c 'import sys; print(sys.stdin.read().split("\r\n\r\n", 1)[1])'
}

# measure RUN SWITCH RB_EXPECTED: one bench step, `systemctl restart relayd`
# AT seconds in; one row of store.tsv.
measure() {
	local run=$1 switch=$2 want_rb=$3 since bench t0 t1
	relay_status >"$dir/before.json"
	since=$(host date +%s.%N)
	host nice -n -10 ip netns exec relay "$dir/relayctl" bench \
		--relay 127.0.0.1:7788 --control 127.0.0.1:7789 --players "$PLAYERS" --step-duration "$STEP" \
		--interval 250ms --calibrate 0 --lobby-base $((run * 100)) --json >"$dir/bench.json" 2>"$dir/bench.err" &
	bench=$!
	sleep "$AT"
	t0=$(date +%s%N)
	host systemctl restart relayd || { echo "restart-impact-systemd: run $run $switch: systemctl restart failed" >&2; exit 1; }
	t1=$(date +%s%N)
	wait "$bench" || true
	relay_status >"$dir/after.json"
	host journalctl -u relayd -o cat --no-pager --since "@$since" >"$dir/journal.txt"
	cp "$dir/bench.json" "$dir/bench-$run-$switch.json"
	cp "$dir/journal.txt" "$dir/journal-$run-$switch.txt"
	cp "$dir/before.json" "$dir/before-$run-$switch.json"
	cp "$dir/after.json" "$dir/after-$run-$switch.json"
	python3 - "$run" "$switch" "$want_rb" $(((t1 - t0) / 1000000)) "$dir" >>"$dir/store.tsv" <<'PY'
import json, re, sys
from datetime import datetime
run, switch, want_rb, restart_ms, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
s = json.load(open(f"{d}/bench.json"))["steps"][0]
before, after = json.load(open(f"{d}/before.json")), json.load(open(f"{d}/after.json"))
r = s.get("restarts") or []
if len(r) != 1:
    sys.exit(f"run {run} {switch}: the bench saw {len(r)} restarts, want 1")
def fields(line):
    return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line)}
def t(v):  # RFC 3339 with nanoseconds, as relayd logs it
    date, frac = v.rstrip("Z").split(".")
    return datetime.fromisoformat(date).timestamp() + float("0." + frac)
closed = started = first = None
for line in open(f"{d}/journal.txt"):
    f = fields(line)
    if f.get("msg") == "socket closed":
        closed = f
    elif f.get("msg") == "relayd started" and closed:
        started = f
    elif f.get("msg") == "first datagram read" and started and not first:
        first = f
if not (closed and started and first):
    sys.exit(f"run {run} {switch}: the journal lacks the old relayd's stop, the new one's start or its first read")
gap = (t(first["at"]) - t(closed["last_read_at"])) * 1e3
unbound = (t(started["socket_bound_at"]) - t(closed["at"])) * 1e3 if started.get("socket_from", "bound") == "bound" else 0
print("\t".join(str(x) for x in (run, switch, s["planned_deliveries"], s["loss"], s["bench_lost_in"], s["bench_lost_out"],
      s["icmp_errors"], r[0]["lobbies_cut"], r[0]["players_cut"], f"{gap:.1f}", f"{unbound:.1f}", restart_ms,
      "yes" if after["socket_inode"] == before["socket_inode"] else "no", after["so_rcvbuf_effective"], want_rb,
      after.get("socket_from", "(none)"), after["counters"]["rx_drops"] - (before["counters"]["rx_drops"] if after["socket_inode"] == before["socket_inode"] else 0),
      "yes" if s["valid"] else "no: " + "; ".join(s.get("invalid") or []))))
PY
	echo "restart-impact-systemd: run $run $switch done" >&2
}

store_mode() {
	local mib=1048576
	# Start from the store-unaware release, as a host before the upgrade.
	host systemctl stop relayd
	stage 1.7.0 "$dir/relayd-unaware" "$mib"
	host systemctl start relayd
	printf 'run\tswitch\tplanned\tlost\tlost_in\tlost_out\ticmp_errors\tlobbies_cut\tplayers_cut\tread_gap_ms\tunbound_ms\trestart_ms\tsame_inode\trb\trb_expected\tsocket_from\trx_drops\tvalid\n' >"$dir/store.tsv"
	for i in $(seq 1 "$RUNS"); do
		sleep 3 # the last run's players expire (RELAYD_IDLE_TIMEOUT=2s)
		stage "1.7.$i" "$dir/relayd-unaware" $((2 * mib))
		measure "$i" unaware $((4 * mib))
		sleep 3
		stage "1.9.$((2 * i))" "$dir/relayd-aware" "$mib"
		measure "$i" first $((2 * mib))
		sleep 3
		stage "1.9.$((2 * i + 1))" "$dir/relayd-aware" $((4 * mib))
		measure "$i" kept $((8 * mib))
		# The store-unaware release cannot bind while the store holds the
		# port: stop empties it.
		host systemctl stop relayd
		stage "1.7.0" "$dir/relayd-unaware" "$mib"
		host systemctl start relayd
	done
	echo "restart-impact-systemd: load at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	echo "systemd manager, systemctl restart relayd, $PLAYERS players, lobbies of 8, 60 Hz, $AT s into a $STEP step; kernel $(uname -r)"
	column -t -s $'\t' "$dir/store.tsv"
	python3 - "$dir/store.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
num = ["lost", "lost_in", "lost_out", "icmp_errors", "lobbies_cut", "players_cut", "read_gap_ms", "unbound_ms", "restart_ms", "rx_drops"]
for sw in ("unaware", "first", "kept"):
    rs = [r for r in rows if r["switch"] == sw]
    med = ", ".join(f"{k} {statistics.median(float(r[k]) for r in rs):g} ({min(float(r[k]) for r in rs):g}-{max(float(r[k]) for r in rs):g})" for k in num)
    same = sum(r["same_inode"] == "yes" for r in rs)
    rb = sum(r["rb"] == r["rb_expected"] for r in rs)
    valid = sum(r["valid"] == "yes" for r in rs)
    print(f"medians {sw}: {med}; same inode {same} of {len(rs)}; rb as asked {rb} of {len(rs)}; valid steps {valid} of {len(rs)}")
PY
}

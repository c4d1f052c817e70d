#!/usr/bin/env bash
# bench-fleet.sh: relayctl apply on fleets of lab hosts (10, 50, 100, 200 by
# default), without and with staging ahead (relayctl stage the day before,
# apply in the window), beside parallel-ssh running one trivial command on
# the same hosts. Per size it prints the median wall time and relayctl's
# peak memory (max RSS, GNU time) of each, the bytes relayctl uploaded, and
# what the lab itself cost the machine; a size the machine cannot hold is
# reported with the reason, and the sizes above it are skipped. Never
# asserts on a time (ratios in one run, no timed assertions). See docs/bench-fleet.md.
#
# Needs root (the lab: sshd, mount and network namespaces) and changes the
# machine's global net.core.rmem_max/rmem_default: it takes the same lock as
# the Go tests (/tmp/relayctl-global-sysctl.lock) and restores the values
# it found at exit.
#
# Settings (environment):
#   SIZES="10 50 100 200"  fleet sizes, in order
#   RUNS=3         timed runs per size and tool
#   PARALLEL=50    relayctl --parallel and parallel-ssh -p (at most the size)
#   STABLE_FOR=0   relayctl apply's --stable-for: 0, one read-back, as
#                  parallel-ssh's floor judges one command; empty: relayctl's
#                  default (10s), about 10 s more for each wave and batch
#   QUICK=1        SIZES=3 RUNS=1, for development
#   APPLY_ONLY=1   plan and apply only (no stage, no apply after stage, no
#                  parallel-ssh): a bigger fleet in less time under the lock
#   MIN_FREE_MIB=1024  refuse to start a size when the machine would have
#                  less memory available than this, by the last size's cost
#   WORK=DIR       where builds, labs and results go (default: a new
#                  /tmp/bench-fleet.XXXXXX)
#   LOCK_WAIT=900  seconds to wait for the global sysctl lock
#
# Examples:
#   sudo scripts/bench-fleet.sh
#   sudo QUICK=1 scripts/bench-fleet.sh
#   sudo SIZES="100 200 400" RUNS=1 scripts/bench-fleet.sh
#
# Output: progress on stderr, the table on stdout (also in WORK/results/table.txt).
# Exit: 0 every timed run succeeded; 1 otherwise (the table still prints;
# failed runs are listed and left out of the medians).
set -euo pipefail

if [ "${QUICK:-0}" = 1 ]; then
	SIZES=${SIZES:-3}
	RUNS=${RUNS:-1}
fi
SIZES=${SIZES:-10 50 100 200}
RUNS=${RUNS:-3}
PARALLEL=${PARALLEL:-50}
STABLE_FOR=${STABLE_FOR-0}
MIN_FREE_MIB=${MIN_FREE_MIB:-1024}
LOCK_WAIT=${LOCK_WAIT:-900}
for v in $SIZES $RUNS $PARALLEL $MIN_FREE_MIB; do
	case $v in '' | *[!0-9]*) echo "bench-fleet: SIZES, RUNS, PARALLEL and MIN_FREE_MIB must be numbers" >&2; exit 2 ;; esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
. scripts/demo-lib.sh

LAB_RELAY_CONFIG=$'RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=127.0.0.1:7789\n' # lab.DefaultRelayConfig
INCIDENT=212992
TARGET=8388608
GLOBAL_KEYS="net.core.rmem_max net.core.rmem_default"

log() { printf 'bench-fleet: %s\n' "$*" >&2; }
die() { printf 'bench-fleet: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (lab hosts: sshd, namespaces; global sysctls)"

# --- prerequisites ----------------------------------------------------------
./scripts/lab-deps.sh >&2
need_pkgs=()
command -v parallel-ssh >/dev/null || need_pkgs+=(pssh)
[ -x /usr/bin/time ] || need_pkgs+=(time)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]} with apt-get"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
command -v go >/dev/null || die "go not found"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 missing (reads the receipts)"

WORK=${WORK:-$(mktemp -d /tmp/bench-fleet.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
RES=$WORK/results
mkdir -p "$RES"

# --- build ------------------------------------------------------------------
log "building relayctl, relayd 1.7.0 and 1.8.0, relaylab (in $WORK)"
REV=$(git describe --tags --always --dirty 2>/dev/null || echo devel)
{ git rev-parse HEAD; git status --short --untracked-files=no; } >"$RES/git.txt" 2>/dev/null || true
build_tool ./cmd/relayctl "$WORK/relayctl" "$REV"
build_release 1.7.0 "$WORK/relayd-1.7.0"
build_release 1.8.0 "$WORK/relayd-1.8.0"
build_tool ./internal/cmd/relaylab "$WORK/relaylab"
RELAYCTL=$WORK/relayctl
RELAYLAB=$WORK/relaylab
RELEASE_BYTES=$(stat -c %s "$WORK/relayd-1.8.0")

# --- the global sysctls: lock, save, restore at exit ------------------------
# (sysctl_read, sysctl_set and the kernel_lock_* functions come from
# scripts/demo-lib.sh)
# The lock is held one run at a time (a run at 200 hosts takes minutes),
# so tests of other worktrees that change the global values get their turn
# between runs; what was there is restored each time it is let go.
kernel_lock_open bench-fleet || exit 1
declare -A SAVED
LOCKED=0
take_lock() {
	local k
	# shellcheck disable=SC2154 # kernel_lock_open (demo-lib.sh) sets kernel_lock_fd
	kernel_lock_take "$kernel_lock_fd" bench-fleet "$LOCK_WAIT" || exit 1
	kernel_lock_record "$kernel_lock_fd" "$0"
	LOCKED=1
	for k in $GLOBAL_KEYS; do SAVED[$k]=$(sysctl_read "$k"); done
}
release_lock() {
	local k now rc=0
	[ "$LOCKED" = 1 ] || return 0
	for k in $GLOBAL_KEYS; do
		now=$(sysctl_read "$k")
		[ "$now" = "${SAVED[$k]}" ] || printf '%s\n' "${SAVED[$k]}" >"$(sysctl_path "$k")"
		now=$(sysctl_read "$k")
		[ "$now" = "${SAVED[$k]}" ] || { log "error: could not restore $k to ${SAVED[$k]}: it reads $now"; rc=1; }
	done
	LOCKED=0
	kernel_lock_clear "$kernel_lock_fd"
	flock -u "$kernel_lock_fd"
	return "$rc"
}

LAB=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [ -n "$LAB" ] && [ -f "$LAB/lab.json" ]; then
		log "stopping the lab in $LAB"
		"$RELAYLAB" down --dir "$LAB" >&2 || { log "relaylab down failed: the lab in $LAB may still run"; rc=1; }
	fi
	release_lock || rc=1
	log "results in $RES"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mem_avail_mib() { awk '/^MemAvailable:/ { printf "%d", $2 / 1024 }' /proc/meminfo; }

# --- one lab at a time ------------------------------------------------------
# reset_hosts: put every host back to the pre-apply state, untimed: the
# machine's rmem_* to the incident's, each host's drop-ins, staged files,
# release store and 1.8.0 removed, current back at 1.7.0, the lab's relay
# config, an empty state folder; relayd 1.7.0 restarted.
reset_hosts() {
	local n r
	for k in $GLOBAL_KEYS; do sysctl_set "$k" "$INCIDENT"; done
	for n in "${NAMES[@]}"; do
		r=$LAB/$n/root
		rm -f "$r/etc/sysctl.d/90-relayctl.conf" "$r/etc/sysctl.d/90-relayctl.conf.relayctl-new" "$r/etc/relay/relayd.env.relayctl-new"
		rm -rf "$r/opt/relay/releases/1.8.0" "$r/opt/relay/releases/.sha256"
		ln -sfn releases/1.7.0 "$r/opt/relay/current"
		printf '%s' "$LAB_RELAY_CONFIG" >"$r/etc/relay/relayd.env"
		find "$r/var/lib/relayctl" -mindepth 1 -delete
	done
	printf '%s\n' "${NAMES[@]}" | xargs -P 8 -I{} "$RELAYLAB" exec --dir "$LAB" {} -- /opt/relay/bin/relay-service restart >/dev/null ||
		die "reset: restarting relayd 1.7.0 failed"
}

# timed NAME RUN CMD...: RES/NAME-RUN.{out,err,time}; "RUN WALL_S MAXRSS_KB RC" to RES/NAME.tsv.
timed() {
	local name=$1 run=$2 t0 t1 rc=0 rss wall
	shift 2
	t0=$(date +%s%N)
	/usr/bin/time -v -o "$RES/$name-$run.time" "$@" >"$RES/$name-$run.out" 2>"$RES/$name-$run.err" || rc=$?
	t1=$(date +%s%N)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
	rss=$(sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$RES/$name-$run.time")
	printf '%s\t%s\t%s\t%s\n' "$run" "$wall" "${rss:-0}" "$rc" >>"$RES/$name.tsv"
	TIMED_RC=$rc TIMED_WALL=$wall
}

FAILURES=0
mark_failed() {
	FAILURES=$((FAILURES + 1))
	printf '%s\t%s\n' "$2" "$3" >>"$RES/$1.failed"
	log "$1 run $2 FAILED: $3"
}

# receipt_check FILE WANT: every host's outcome is WANT; prints the bytes
# uploaded in all, or the hosts that are not.
receipt_check() {
	/usr/bin/python3 - "$1" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [h for h in r["hosts"] if h.get("outcome") != sys.argv[2]]
for h in bad[:5]:
    print("%s: %s: %s" % (h["host"], h.get("outcome"), h.get("reason", "")))
if bad or not r["hosts"]:
    sys.exit(1)
print(sum(h.get("bytes_uploaded", 0) for h in r["hosts"]))
EOF
}


KERNEL=$(uname -r)
CPUS=$(nproc)
STOPPED_AT="" STOP_WHY=""
declare -A LAB_MIB LAB_START
prev_size=0 prev_mib=0
log "machine: $CPUS CPUs, kernel $KERNEL, $(mem_avail_mib) MiB available; sizes $SIZES, $RUNS runs, --parallel $PARALLEL"

for N in $SIZES; do
	# Will the machine hold it? Extrapolate from the last size's cost.
	if [ "$prev_size" -gt 0 ]; then
		need=$((prev_mib * N / prev_size))
		if [ $(($(mem_avail_mib) - need)) -lt "$MIN_FREE_MIB" ]; then
			STOPPED_AT=$N STOP_WHY="memory: $N hosts would need about $need MiB (the lab of $prev_size took $prev_mib MiB), leaving less than $MIN_FREE_MIB MiB of the $(mem_avail_mib) MiB available"
			log "skipping $N hosts: $STOP_WHY"
			break
		fi
	fi
	P=$((N < PARALLEL ? N : PARALLEL))
	LAB=$WORK/lab-$N
	before=$(mem_avail_mib)
	log "starting $N lab hosts with relayd 1.7.0 running"
	t0=$(date +%s%N)
	if ! "$RELAYLAB" up --dir "$LAB" --hosts "$N" --relayd "$WORK/relayd-1.7.0" --relay-version 1.7.0 >"$RES/lab-up-$N.txt" 2>"$RES/lab-up-$N.err"; then
		STOPPED_AT=$N STOP_WHY="relaylab up failed: $(tail -n 3 "$RES/lab-up-$N.err" | paste -sd' ' -)"
		log "$STOP_WHY"
		"$RELAYLAB" down --dir "$LAB" >&2 2>/dev/null || true
		break
	fi
	LAB_START[$N]=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
	sleep 1
	LAB_MIB[$N]=$((before - $(mem_avail_mib)))
	prev_size=$N prev_mib=${LAB_MIB[$N]}
	log "$N hosts up in ${LAB_START[$N]} s, costing about ${LAB_MIB[$N]} MiB"
	SSH=(--ssh-config "$LAB/ssh_config" --known-hosts "$LAB/known_hosts" --identity "$LAB/id_ed25519")
	NAMES=()
	for i in $(seq 1 "$N"); do NAMES+=("lab-$i"); done
	printf '%s\n' "${NAMES[@]}" >"$WORK/hosts-$N"
	SPEC=$WORK/fleet-$N.yaml
	{
		printf 'name: bench-fleet-%s\nhosts:\n' "$N"
		for n in "${NAMES[@]}"; do printf '  - %s\n' "$n"; done
		cat <<EOF
sysctl:
  net.core.rmem_max: $TARGET
relay:
  port: 7788
  so_rcvbuf: 4194304
  release:
    version: 1.8.0
    artifact: $WORK/relayd-1.8.0
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
EOF
	} >"$SPEC"
	for f in plan apply stage staged-apply pssh; do : >"$RES/$f-$N.tsv"; done
	plan=$WORK/fleet-$N.plan
	for run in $(seq 1 "$RUNS"); do
		release_lock || die "could not restore the global sysctls"
		take_lock
		# Without staging: apply uploads the release to every host.
		reset_hosts
		timed "plan-$N" "$run" "$RELAYCTL" plan "$SPEC" --out "$plan" --detailed-exitcode --parallel "$P" "${SSH[@]}"
		[ "$TIMED_RC" = 2 ] || { mark_failed "plan-$N" "$run" "exit $TIMED_RC, want 2; see $RES/plan-$N-$run.err"; continue; }
		timed "apply-$N" "$run" "$RELAYCTL" apply "$plan" --parallel "$P" "${SSH[@]}" ${STABLE_FOR:+--stable-for "$STABLE_FOR"}
		cp "$plan.receipt.json" "$RES/apply-$N-$run.receipt.json" 2>/dev/null || true
		if [ "$TIMED_RC" != 0 ] || ! bytes=$(receipt_check "$plan.receipt.json" applied); then
			mark_failed "apply-$N" "$run" "exit $TIMED_RC; $(receipt_check "$plan.receipt.json" applied 2>&1 | paste -sd';' -)"
		else
			printf '%s\t%s\n' "$run" "$bytes" >>"$RES/apply-$N.bytes"
			log "$N hosts, run $run: apply ${TIMED_WALL}s, $bytes bytes uploaded"
		fi

		[ "${APPLY_ONLY:-0}" = 1 ] && continue

		# With staging ahead: stage (the day before), then apply (the window).
		reset_hosts
		"$RELAYCTL" plan "$SPEC" --out "$plan" --parallel "$P" "${SSH[@]}" >/dev/null 2>&1 || true
		timed "stage-$N" "$run" "$RELAYCTL" stage "$plan" --parallel "$P" "${SSH[@]}"
		if [ "$TIMED_RC" != 0 ] || ! bytes=$(receipt_check "$plan.stage.json" staged); then
			mark_failed "stage-$N" "$run" "exit $TIMED_RC; see $RES/stage-$N-$run.out"
			continue
		fi
		printf '%s\t%s\n' "$run" "$bytes" >>"$RES/stage-$N.bytes"
		log "$N hosts, run $run: stage ${TIMED_WALL}s, $bytes bytes uploaded"
		timed "staged-apply-$N" "$run" "$RELAYCTL" apply "$plan" --parallel "$P" "${SSH[@]}" ${STABLE_FOR:+--stable-for "$STABLE_FOR"}
		cp "$plan.receipt.json" "$RES/staged-apply-$N-$run.receipt.json" 2>/dev/null || true
		if [ "$TIMED_RC" != 0 ] || ! bytes=$(receipt_check "$plan.receipt.json" applied); then
			mark_failed "staged-apply-$N" "$run" "exit $TIMED_RC; $(receipt_check "$plan.receipt.json" applied 2>&1 | paste -sd';' -)"
		else
			printf '%s\t%s\n' "$run" "$bytes" >>"$RES/staged-apply-$N.bytes"
			log "$N hosts, run $run: apply after stage ${TIMED_WALL}s, $bytes bytes uploaded"
		fi

		# parallel-ssh: one trivial command on every host.
		timed "pssh-$N" "$run" parallel-ssh -h "$WORK/hosts-$N" -x "-F $LAB/ssh_config" -p "$P" -t 300 -i true
		ok=$(grep -c '\[SUCCESS\]' "$RES/pssh-$N-$run.out" || true)
		if [ "$TIMED_RC" != 0 ] || [ "$ok" != "$N" ]; then
			mark_failed "pssh-$N" "$run" "exit $TIMED_RC, $ok of $N SUCCESS"
		else
			log "$N hosts, run $run: parallel-ssh ${TIMED_WALL}s"
		fi
	done
	release_lock || die "could not restore the global sysctls"
	log "stopping the $N-host lab"
	"$RELAYLAB" down --dir "$LAB" >&2 || die "relaylab down failed for $LAB"
	rm -rf "$LAB"
	LAB=
done

# --- the table --------------------------------------------------------------
# stat NAME: median, min, max wall (s), ok count, max RSS (MiB) of the
# succeeded runs.
stat() {
	local f=$RES/$1.tsv ok
	[ -s "$f" ] || { echo "- - - 0 -"; return; }
	# The succeeded runs: exit 0 and not marked failed.
	ok=$(awk -F'\t' -v failed="$RES/$1.failed" '
		BEGIN { while ((getline l < failed) > 0) { split(l, a, "\t"); bad[a[1]] = 1 } }
		$4 == 0 && !($1 in bad) { print $2 "\t" $3 }' "$f")
	[ -n "$ok" ] || { echo "- - - 0 -"; return; }
	printf '%s\n' "$ok" | sort -n | awk -F'\t' '
		{ w[NR] = $1; if ($2 > rss) rss = $2 }
		END {
			m = (NR % 2) ? w[(NR + 1) / 2] : (w[NR / 2] + w[NR / 2 + 1]) / 2
			printf "%.2f %.2f %.2f %d %.0f\n", m, w[1], w[NR], NR, rss / 1024
		}'
}
bytes_med() {
	local f=$RES/$1.bytes
	[ -s "$f" ] || { echo "-"; return; }
	cut -f2 "$f" | sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m / 1048576 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.1f", a / b }'; }

{
	printf 'bench-fleet  %s  sizes %s, %s runs each, --parallel %s (%s; repo %s)\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$SIZES" "$RUNS" "$PARALLEL" "relayctl $REV" "$(git rev-parse --short HEAD)"
	printf 'machine      %s CPUs, kernel %s, load average at end %s; release %s bytes\n' "$CPUS" "$KERNEL" "$(cut -d' ' -f1-3 /proc/loadavg)" "$RELEASE_BYTES"
	dirty=$(tail -n +2 "$RES/git.txt" 2>/dev/null | awk '{ print $2 }' | paste -sd' ' -)
	[ -z "$dirty" ] || printf 'uncommitted  %s\n' "$dirty"
	printf '\nmedian wall time in seconds (min-max), relayctl peak RSS in MiB, MiB uploaded by relayctl\n'
	printf '%6s | %-24s | %-24s | %-24s | %-16s | %9s | %s\n' hosts "apply (uploads)" "stage (the day before)" "apply after stage" "parallel-ssh true" "apply/pssh" "lab: start s, MiB"
	for N in $SIZES; do
		[ -n "${LAB_START[$N]:-}" ] || continue
		read -r am amin amax an arss <<<"$(stat "apply-$N")"
		read -r sm smin smax sn srss <<<"$(stat "stage-$N")"
		read -r tm tmin tmax tn trss <<<"$(stat "staged-apply-$N")"
		read -r pm pmin pmax pn _ <<<"$(stat "pssh-$N")"
		printf '%6s | %6s (%s-%s) %3s MiB %5s | %6s (%s-%s) %3s MiB %5s | %6s (%s-%s) %3s MiB %5s | %6s (%s-%s) | %4s %4s | %s, %s\n' "$N" \
			"$am" "$amin" "$amax" "$arss" "$(bytes_med "apply-$N")" \
			"$sm" "$smin" "$smax" "$srss" "$(bytes_med "stage-$N")" \
			"$tm" "$tmin" "$tmax" "$trss" "$(bytes_med "staged-apply-$N")" \
			"$pm" "$pmin" "$pmax" "$(ratio "$am" "$pm")" "$(ratio "$tm" "$pm")" "${LAB_START[$N]}" "${LAB_MIB[$N]}"
		[ "$an$sn$tn$pn" = "$RUNS$RUNS$RUNS$RUNS" ] || printf '%6s   ok runs: apply %s, stage %s, apply after stage %s, pssh %s of %s\n' "" "$an" "$sn" "$tn" "$pn" "$RUNS"
	done
	printf '(apply/pssh: the apply without staging, then the apply after staging, over parallel-ssh)\n'
	if [ -n "$STOPPED_AT" ]; then
		printf '\nstopped before %s hosts: %s\n' "$STOPPED_AT" "$STOP_WHY"
	fi
	# relayctl's own cost per host (GNU time), and the restart window per
	# host (the receipts).
	/usr/bin/python3 - "$RES" $SIZES <<'EOF'
import glob, json, re, statistics, sys
res = sys.argv[1]
def gnutime(f):
    t = open(f).read()
    get = lambda k: float(re.search(re.escape(k) + r": ([0-9.]+)", t).group(1))
    return get("User time (seconds)") + get("System time (seconds)"), get("Maximum resident set size (kbytes)")
for n in sys.argv[2:]:
    for kind in ("plan", "apply", "staged-apply"):
        runs = [gnutime(f) for f in sorted(glob.glob("%s/%s-%s-*.time" % (res, kind, n)))]
        if runs:
            cpu, rss = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print("%s hosts, %-12s relayctl CPU %.1f s (%.1f ms a host), peak RSS %.0f MiB (%.0f KiB a host; median of %d)"
                  % (n, kind + ":", cpu, cpu * 1000 / int(n), rss / 1024, rss / int(n), len(runs)))
for n in sys.argv[2:]:
    for kind in ("apply", "staged-apply"):
        w, pre = [], []
        for f in glob.glob("%s/%s-%s-*.receipt.json" % (res, kind, n)):
            for h in json.load(open(f))["hosts"]:
                if h.get("window_ms"):
                    w.append(h["window_ms"])
                # ms since the host's own start when its window began:
                # connect, lock, observe and the stage (the upload, if any).
                win = [s["ms"] for s in h.get("steps", []) if s.get("phase") == "window"]
                if win:
                    pre.append(win[0])
        if w:
            print("%s hosts, %-12s restart window median %d ms, max %d ms; before its window a host spent %d ms (median; %d host-runs)"
                  % (n, kind + ":", statistics.median(w), max(w), statistics.median(pre) if pre else -1, len(w)))
EOF
	if [ "$FAILURES" -gt 0 ]; then
		printf '\nFAILED runs (not in the medians):\n'
		for f in "$RES"/*.failed; do
			[ -f "$f" ] || continue
			sed "s|^|  $(basename "$f" .failed) run |" "$f"
		done
	fi
} | tee "$RES/table.txt"

[ "$FAILURES" = 0 ] || exit 1

#!/usr/bin/env bash
# bench-apply.sh: wall time of `relayctl apply` on lab hosts, against
# parallel-ssh running one trivial command on the same hosts and
# ansible-playbook doing the smaller job (set net.core.rmem_max with
# ansible.posix.sysctl, restart the relay). Prints medians and ratios,
# never asserts on a time (STYLE.md). See docs/bench-apply.md.
#
# Needs root (the lab: sshd, mount and network namespaces) and changes the
# machine's global net.core.rmem_max/rmem_default: it takes the same lock as
# the Go tests (/tmp/relayctl-global-sysctl.lock), and restores the values
# it found at exit.
#
# Settings (environment):
#   RUNS=5        timed runs per tool
#   HOSTS=20      lab hosts; relayctl apply and plan use --parallel HOSTS,
#                 pssh -p HOSTS, ansible -f HOSTS
#   QUICK=1       RUNS=1 HOSTS=3, for development
#   WORK=DIR      where builds, the lab and the results go (default: a new
#                 /tmp/bench-apply.XXXXXX)
#   KEEP=1        keep the lab's host trees after the run (default: only the
#                 results, receipts and logs are kept)
#   LOCK_WAIT=900 seconds to wait for the global sysctl lock
#
# Examples:
#   sudo scripts/bench-apply.sh
#   sudo QUICK=1 scripts/bench-apply.sh
#   sudo RUNS=9 HOSTS=20 scripts/bench-apply.sh
#
# Output: progress on stderr, the table on stdout (also in WORK/results/table.txt).
# Exit: 0 every timed run of every tool succeeded; 1 otherwise (the table
# still prints, failures are counted and excluded from the medians).
set -euo pipefail

if [ "${QUICK:-0}" = 1 ]; then
	RUNS=${RUNS:-1}
	HOSTS=${HOSTS:-3}
fi
RUNS=${RUNS:-5}
HOSTS=${HOSTS:-20}
KEEP=${KEEP:-0}
LOCK_WAIT=${LOCK_WAIT:-900}
case $RUNS$HOSTS in *[!0-9]*) echo "bench-apply: RUNS and HOSTS must be numbers" >&2; exit 2 ;; esac
[ "$RUNS" -ge 1 ] && [ "$HOSTS" -ge 1 ] || { echo "bench-apply: RUNS and HOSTS must be at least 1" >&2; exit 2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

# The Go tests' lock for the kernel's global values (internal/kerneltest).
GLOBAL_LOCK=/tmp/relayctl-global-sysctl.lock
# What relaylab writes to /etc/relay/relayd.env (lab.DefaultRelayConfig).
LAB_RELAY_CONFIG=$'RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=127.0.0.1:7789\n'
INCIDENT=212992 # the kernel default of the incident: rmem_max and rmem_default
TARGET=8388608  # the spec's net.core.rmem_max
GLOBAL_KEYS="net.core.rmem_max net.core.rmem_default net.core.wmem_max net.core.wmem_default"

log() { printf 'bench-apply: %s\n' "$*" >&2; }
die() { printf 'bench-apply: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (lab hosts: sshd, namespaces; global sysctls)"

# --- prerequisites ----------------------------------------------------------
./scripts/lab-deps.sh >&2 # sshd, ssh, iproute2, util-linux, procps
need_pkgs=()
command -v parallel-ssh >/dev/null || need_pkgs+=(pssh)
command -v ansible-playbook >/dev/null || need_pkgs+=(ansible)
[ -x /usr/bin/time ] || need_pkgs+=(time)
command -v flock >/dev/null || need_pkgs+=(util-linux)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]} with apt-get"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
ansible-doc ansible.posix.sysctl >/dev/null 2>&1 ||
	die "ansible.posix.sysctl not found (Debian's ansible package bundles it; else: ansible-galaxy collection install ansible.posix)"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 missing (ansible's modules run with it on the hosts)"
command -v go >/dev/null || die "go not found"

WORK=${WORK:-$(mktemp -d /tmp/bench-apply.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
LAB=$WORK/lab
RES=$WORK/results
mkdir -p "$RES"

# --- build ------------------------------------------------------------------
log "building bin/relayctl, relayd 1.7.0 and 1.8.0, relaylab (in $WORK)"
REV=$(git describe --tags --always --dirty 2>/dev/null || echo devel)
# What was measured: the commit, and any uncommitted change in the tree.
{ git rev-parse HEAD; git status --short --untracked-files=no; } >"$RES/git.txt" 2>/dev/null || true
mkdir -p bin
go build -ldflags "-X main.Version=$REV" -o bin/relayctl ./cmd/relayctl
go build -ldflags "-X main.Version=1.7.0" -o "$WORK/relayd-1.7.0" ./cmd/relayd
go build -ldflags "-X main.Version=1.8.0" -o "$WORK/relayd-1.8.0" ./cmd/relayd
go build -o "$WORK/relaylab" ./internal/cmd/relaylab
RELAYCTL=$REPO/bin/relayctl
RELAYLAB=$WORK/relaylab

# --- the global sysctls: lock, save, restore at exit ------------------------
sysctl_path() { printf '/proc/sys/%s' "${1//.//}"; }
sysctl_read() { tr -d ' \t\n' <"$(sysctl_path "$1")"; }
# sysctl_set KEY VALUE: write, then read back (never trust an exit code).
sysctl_set() {
	printf '%s\n' "$2" >"$(sysctl_path "$1")"
	local got
	got=$(sysctl_read "$1")
	[ "$got" = "$2" ] || die "set $1: read back $got, want $2"
}

exec 9>>"$GLOBAL_LOCK"
if ! flock -n 9; then
	log "waiting up to ${LOCK_WAIT}s for $GLOBAL_LOCK (a test or another bench changes the global sysctls)"
	flock -w "$LOCK_WAIT" 9 || die "could not take $GLOBAL_LOCK in ${LOCK_WAIT}s"
fi
declare -A SAVED
for k in $GLOBAL_KEYS; do SAVED[$k]=$(sysctl_read "$k"); done

LAB_UP=0
cleanup() {
	local rc=$? k
	trap - EXIT INT TERM
	set +e
	if [ "$LAB_UP" = 1 ] && [ -f "$LAB/lab.json" ]; then
		log "stopping the lab"
		"$RELAYLAB" down --dir "$LAB" >&2 || { log "relaylab down failed: the lab in $LAB may still run"; rc=1; }
	fi
	for k in $GLOBAL_KEYS; do
		local now
		now=$(sysctl_read "$k")
		if [ "$now" != "${SAVED[$k]}" ]; then
			printf '%s\n' "${SAVED[$k]}" >"$(sysctl_path "$k")"
			now=$(sysctl_read "$k")
		fi
		if [ "$now" = "${SAVED[$k]}" ]; then
			log "restored $k = ${SAVED[$k]}"
		else
			log "error: could not restore $k: read back $now, want ${SAVED[$k]}"
			rc=1
		fi
	done
	flock -u 9
	if [ "$KEEP" != 1 ] && [ -d "$LAB" ] && [ ! -f "$LAB/lab.json" ]; then
		rm -rf "$LAB"
	fi
	log "results in $RES"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for k in net.core.rmem_max net.core.rmem_default; do
	log "changing the machine's $k: ${SAVED[$k]} -> $INCIDENT for the bench (restored at exit)"
	sysctl_set "$k" "$INCIDENT"
done

# --- the lab ----------------------------------------------------------------
log "starting $HOSTS lab hosts with relayd 1.7.0 running"
LAB_UP=1
"$RELAYLAB" up --dir "$LAB" --hosts "$HOSTS" --relayd "$WORK/relayd-1.7.0" --relay-version 1.7.0 >"$RES/lab-up.txt"
SSH_CONFIG=$LAB/ssh_config
KNOWN_HOSTS=$LAB/known_hosts
IDENTITY=$LAB/id_ed25519
NAMES=()
for i in $(seq 1 "$HOSTS"); do NAMES+=("lab-$i"); done

# The spec, as in cmd/relayctl/lab_test.go.
SPEC=$WORK/bench.yaml
{
	printf 'name: bench-apply\nhosts:\n'
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

# pssh's host list, ansible's inventory, config and play.
printf '%s\n' "${NAMES[@]}" >"$WORK/hosts"
{
	printf '[lab]\n'
	printf '%s\n' "${NAMES[@]}"
} >"$WORK/inventory"
cat >"$WORK/ansible.cfg" <<EOF
[defaults]
inventory = $WORK/inventory
forks = $HOSTS
host_key_checking = True
gathering = explicit
interpreter_python = /usr/bin/python3
retry_files_enabled = False
nocows = True

[ssh_connection]
# The lab's ssh_config: its aliases, its known_hosts (StrictHostKeyChecking
# yes), its identity. ControlMaster/ControlPersist are Ansible's defaults.
ssh_args = -F $SSH_CONFIG -o ControlMaster=auto -o ControlPersist=60s
pipelining = True
EOF
cat >"$WORK/play.yml" <<EOF
- name: raise rmem_max and restart the relay
  hosts: lab
  gather_facts: false
  tasks:
    - name: set net.core.rmem_max
      ansible.posix.sysctl:
        name: net.core.rmem_max
        value: "$TARGET"
        sysctl_set: true
        # A drop-in, like relayctl's: the lab's /etc/sysctl.conf is a bind
        # mount, which Ansible's atomic rename cannot replace (EBUSY).
        sysctl_file: /etc/sysctl.d/90-ansible.conf
    - name: restart the relay
      ansible.builtin.command: /opt/relay/bin/relay-service restart
EOF

# --- reset to the pre-apply state (not timed) -------------------------------
# Each host's private trees are directories on the machine (lab-N/root,
# bind-mounted into the host's sshd): put back what relaylab up left there,
# then restart relayd 1.7.0 on every host through relay-service.
reset_hosts() {
	local n r
	sysctl_set net.core.rmem_max "$INCIDENT"
	sysctl_set net.core.rmem_default "$INCIDENT"
	for n in "${NAMES[@]}"; do
		r=$LAB/$n/root
		rm -f "$r/etc/sysctl.d/90-relayctl.conf" "$r/etc/sysctl.d/90-relayctl.conf.relayctl-new" "$r/etc/sysctl.d/90-ansible.conf"
		rm -rf "$r/opt/relay/releases/1.8.0"
		ln -sfn releases/1.7.0 "$r/opt/relay/current"
		printf '%s' "$LAB_RELAY_CONFIG" >"$r/etc/relay/relayd.env"
		find "$r/var/lib/relayctl" -mindepth 1 -delete
		rm -rf "$r/root/.ansible"
	done
	printf '%s\n' "${NAMES[@]}" | xargs -P 8 -I{} "$RELAYLAB" exec --dir "$LAB" {} -- /opt/relay/bin/relay-service restart >/dev/null ||
		die "reset: restarting relayd 1.7.0 failed"
	for n in "${NAMES[@]}"; do
		"$RELAYLAB" exec --dir "$LAB" "$n" -- /opt/relay/bin/relay-service pid >/dev/null || die "reset: $n: relay not running"
		[ "$(readlink "$LAB/$n/root/opt/relay/current")" = releases/1.7.0 ] || die "reset: $n: current is not releases/1.7.0"
	done
}

# --- timing -----------------------------------------------------------------
# timed NAME RUN CMD...: run CMD under /usr/bin/time -v with stdout and
# stderr in RES/NAME-RUN.{out,err}; append "RUN WALL_S MAXRSS_KB RC" to
# RES/NAME.tsv. Wall time is the monotonic-enough difference of date +%s%N
# around it (GNU time prints only centiseconds).
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

# mark_failed NAME RUN WHY: the run does not count in the medians.
FAILURES=0
mark_failed() {
	FAILURES=$((FAILURES + 1))
	printf '%s\t%s\n' "$2" "$3" >>"$RES/$1.failed"
	log "run $2: $1 FAILED: $3"
}

# check_receipt RUN: every host applied, else print each host's outcome,
# state and reason from the receipt.
check_receipt() {
	/usr/bin/python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [h for h in r["hosts"] if h.get("outcome") != "applied"]
for h in bad:
    print("%s: %s (%s): %s" % (h["host"], h.get("outcome"), h.get("state"), h.get("reason", "")))
sys.exit(1 if bad or not r["hosts"] else 0)
EOF
}

# receipt_windows RUN FILE: append per host "RUN HOST CANARY WINDOW_MS
# ROUND_TRIPS FIRST_STEP_MS LAST_STEP_MS" to RES/relayctl-windows.tsv. Step
# times count from the host's own start: the first step (stage begin) comes
# after connect, lock and observe; the last is the read-back.
receipt_windows() {
	/usr/bin/python3 - "$1" "$2" >>"$RES/relayctl-windows.tsv" <<'EOF'
import json, sys
for i, h in enumerate(json.load(open(sys.argv[2]))["hosts"]):
    st = h.get("steps") or [{"ms": 0}]
    print("\t".join(str(x) for x in (sys.argv[1], h["host"], int(i == 0), h.get("window_ms", 0),
                                      h.get("round_trips", 0), st[0]["ms"], st[-1]["ms"])))
EOF
}

KERNEL=$(uname -r)
CPUS=$(nproc)
log "machine: $CPUS CPUs, kernel $KERNEL, load $(cut -d' ' -f1-3 /proc/loadavg); $RUNS runs, $HOSTS hosts"
: >"$RES/relayctl-plan.tsv"
: >"$RES/relayctl-apply.tsv"
: >"$RES/ansible.tsv"
: >"$RES/pssh.tsv"
: >"$RES/relayctl-windows.tsv"

for run in $(seq 1 "$RUNS"); do
	# relayctl: plan (timed on its own), then apply.
	reset_hosts
	plan=$WORK/run-$run.plan
	timed relayctl-plan "$run" "$RELAYCTL" plan "$SPEC" -out "$plan" --parallel "$HOSTS" \
		--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY"
	if [ "$TIMED_RC" != 2 ]; then
		mark_failed relayctl-plan "$run" "exit $TIMED_RC, want 2 (changes); see $RES/relayctl-plan-$run.err"
		# Mark the apply failed too, so the run is accounted for.
		printf '%s\t%s\t%s\t%s\n' "$run" 0 0 -1 >>"$RES/relayctl-apply.tsv"
		mark_failed relayctl-apply "$run" "no plan"
	else
		log "run $run: relayctl plan ${TIMED_WALL}s"
		timed relayctl-apply "$run" "$RELAYCTL" apply "$plan" --parallel "$HOSTS" \
			--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY"
		cp "$plan.receipt.json" "$RES/relayctl-apply-$run.receipt.json" 2>/dev/null || true
		cp "$plan.receipt.md" "$RES/relayctl-apply-$run.receipt.md" 2>/dev/null || true
		receipt_windows "$run" "$plan.receipt.json" 2>/dev/null || true
		why=""
		if [ "$TIMED_RC" != 0 ]; then why="exit $TIMED_RC"; fi
		if ! bad=$(check_receipt "$plan.receipt.json" 2>&1); then
			why="${why:+$why; }receipt: $(printf '%s' "$bad" | paste -sd ';' -)"
		fi
		got=$(sysctl_read net.core.rmem_max)
		[ "$got" = "$TARGET" ] || why="${why:+$why; }rmem_max read back $got, want $TARGET"
		if [ -n "$why" ]; then
			mark_failed relayctl-apply "$run" "$why"
		else
			log "run $run: relayctl apply ${TIMED_WALL}s"
		fi
	fi

	# ansible-playbook: the sysctl and a restart.
	reset_hosts
	cpdir=$WORK/cp-$run
	mkdir -p "$cpdir"
	ANSIBLE_CONFIG=$WORK/ansible.cfg ANSIBLE_SSH_CONTROL_PATH_DIR=$cpdir ANSIBLE_FORCE_COLOR=0 \
		timed ansible "$run" ansible-playbook -i "$WORK/inventory" -f "$HOSTS" "$WORK/play.yml"
	# Close the persistent connections, so the next run starts cold as well.
	for s in "$cpdir"/*; do [ -S "$s" ] && ssh -o ControlPath="$s" -O exit dummy >/dev/null 2>&1; done || true
	why=""
	[ "$TIMED_RC" = 0 ] || why="exit $TIMED_RC"
	ok=$(grep -cE '^lab-[0-9]+ +: ok=2 +changed=2 +unreachable=0 +failed=0' "$RES/ansible-$run.out" || true)
	[ "$ok" = "$HOSTS" ] || why="${why:+$why; }$ok of $HOSTS hosts ok=2 changed=2 in the recap"
	got=$(sysctl_read net.core.rmem_max)
	[ "$got" = "$TARGET" ] || why="${why:+$why; }rmem_max read back $got, want $TARGET"
	if [ -n "$why" ]; then mark_failed ansible "$run" "$why; see $RES/ansible-$run.out"; else log "run $run: ansible-playbook ${TIMED_WALL}s"; fi

	# parallel-ssh: one trivial command on every host.
	timed pssh "$run" parallel-ssh -h "$WORK/hosts" -x "-F $SSH_CONFIG" -p "$HOSTS" -t 60 -i true
	why=""
	[ "$TIMED_RC" = 0 ] || why="exit $TIMED_RC"
	ok=$(grep -c '\[SUCCESS\]' "$RES/pssh-$run.out" || true)
	[ "$ok" = "$HOSTS" ] || why="${why:+$why; }$ok of $HOSTS hosts SUCCESS"
	if [ -n "$why" ]; then mark_failed pssh "$run" "$why; see $RES/pssh-$run.out"; else log "run $run: parallel-ssh ${TIMED_WALL}s"; fi
done

# --- the table --------------------------------------------------------------
# succeeded NAME COL: column COL of NAME's runs that succeeded, sorted.
succeeded() {
	local f=$RES/$1.tsv failed=$RES/$1.failed
	awk -F'\t' -v failed="$failed" -v col="$2" '
		BEGIN { while ((getline l < failed) > 0) { split(l, a, "\t"); bad[a[1]] = 1 } }
		!($1 in bad) && $4 != "-1" { print $col }' "$f" | sort -n
}
# stat NAME: "median min max n" of the wall times over the runs that succeeded.
stat() {
	succeeded "$1" 2 | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "- - - 0"; exit }
			m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%.2f %.2f %.2f %d\n", m, v[1], v[NR], NR
		}'
}
# peak NAME: the median and the largest max RSS (MiB) over the succeeded runs.
peak() {
	succeeded "$1" 3 | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "- -"; exit }
			m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%.1f %.1f\n", m / 1024, v[NR] / 1024
		}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

read -r ap_med ap_min ap_max ap_n <<<"$(stat relayctl-apply)"
read -r pl_med pl_min pl_max pl_n <<<"$(stat relayctl-plan)"
read -r an_med an_min an_max an_n <<<"$(stat ansible)"
read -r ps_med ps_min ps_max ps_n <<<"$(stat pssh)"
read -r ap_rss_med ap_rss_max <<<"$(peak relayctl-apply)"
read -r _ pl_rss_max <<<"$(peak relayctl-plan)"
read -r _ an_rss_max <<<"$(peak ansible)"
read -r _ ps_rss_max <<<"$(peak pssh)"

{
	printf 'bench-apply  %s  %s hosts, %s runs  (%s; repo %s)\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$HOSTS" "$RUNS" "relayctl $REV" "$(git rev-parse --short HEAD)"
	printf 'machine      %s CPUs, kernel %s, load average at end %s\n' "$CPUS" "$KERNEL" "$(cut -d' ' -f1-3 /proc/loadavg)"
	dirty=$(tail -n +2 "$RES/git.txt" 2>/dev/null | awk '{ print $2 }' | paste -sd' ' -)
	[ -z "$dirty" ] || printf 'uncommitted  %s\n' "$dirty"
	printf '\n'
	printf '%-42s %8s %8s %8s %5s %14s\n' "wall time, seconds" median min max ok "max RSS MiB*"
	printf '%-42s %8s %8s %8s %5s %14s\n' "relayctl apply --parallel $HOSTS" "$ap_med" "$ap_min" "$ap_max" "$ap_n/$RUNS" "$ap_rss_max"
	printf '%-42s %8s %8s %8s %5s %14s\n' "relayctl plan  --parallel $HOSTS" "$pl_med" "$pl_min" "$pl_max" "$pl_n/$RUNS" "$pl_rss_max"
	printf '%-42s %8s %8s %8s %5s %14s\n' "ansible-playbook -f $HOSTS (sysctl+restart)" "$an_med" "$an_min" "$an_max" "$an_n/$RUNS" "$an_rss_max"
	printf '%-42s %8s %8s %8s %5s %14s\n' "parallel-ssh -p $HOSTS true" "$ps_med" "$ps_min" "$ps_max" "$ps_n/$RUNS" "$ps_rss_max"
	printf '\nratios of medians\n'
	printf '  relayctl apply / parallel-ssh       %s\n' "$(ratio "$ap_med" "$ps_med")"
	printf '  relayctl apply / ansible-playbook   %s\n' "$(ratio "$ap_med" "$an_med")"
	printf '  (relayctl plan + apply) / ansible   %s\n' "$(ratio "$(awk -v a="$ap_med" -v b="$pl_med" 'BEGIN { if (a == "-" || b == "-") print "-"; else print a + b }')" "$an_med")"
	printf '\nrelayctl apply peak memory (max RSS, GNU time): %s MiB (median over runs %s MiB)\n' "$ap_rss_max" "$ap_rss_med"
	# Per-host phases from the receipts (ms since the host's own start).
	/usr/bin/python3 - "$RES/relayctl-windows.tsv" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if int(r[3]) > 0]
if rows:
    med = lambda xs: int(statistics.median(xs))
    rest = [r for r in rows if r[2] == "0"]
    can = [r for r in rows if r[2] == "1"]
    print("relayctl restart window per host (receipts, %d host-runs): median %d ms, max %d ms; %d SSH round trips per host"
          % (len(rows), med([int(r[3]) for r in rows]), max(int(r[3]) for r in rows), med([int(r[4]) for r in rows])))
    if can:
        print("  canary (first host, alone): read back at %d ms (median)" % med([int(r[6]) for r in can]))
    if rest:
        print("  other hosts (%d at once): staging starts at %d ms (connect, lock, observe), read back at %d ms (medians)"
              % (len(rest) // max(1, len(can)), med([int(r[5]) for r in rest]), med([int(r[6]) for r in rest])))
EOF
	printf '* max RSS is the largest single process of the run (ru_maxrss of the children),\n'
	printf '  not a sum: ansible forks a worker per host, pssh an ssh per host.\n'
	if [ "$FAILURES" -gt 0 ]; then
		printf '\nFAILED runs (not in the medians):\n'
		for f in "$RES"/*.failed; do
			[ -f "$f" ] || continue
			sed "s|^|  $(basename "$f" .failed) run |" "$f"
		done
	fi
} | tee "$RES/table.txt"

[ "$FAILURES" = 0 ] || exit 1

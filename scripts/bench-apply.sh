#!/usr/bin/env bash
# bench-apply.sh: wall time of `relayctl apply` on lab hosts, against, in
# the same run on the same hosts:
#   - ansible-playbook doing the same job (copy the release with a
#     checksum, write the relay config and the sysctl drop-in, set the
#     sysctl, switch the symlink, restart, read rb back with ss and assert
#     it), with Ansible's own strategy and with mitogen's (ansible-mitogen);
#   - ansible-playbook doing the smaller job (set net.core.rmem_max with
#     ansible.posix.sysctl, restart the relay);
#   - parallel-ssh running `true` (the floor: one SSH command a host).
# relayctl is timed three times: a full apply (the upload included, the
# release zstd-compressed: the hosts keep no release relayctl shipped), the
# same as a release upgrade (the hosts keep 1.7.0 in their release store,
# as relayctl's earlier apply leaves it, and relayctl's cache has it: the
# release goes as a zstd patch from it), and an apply of a plan whose
# release `relayctl stage` put on the hosts first. Each prints the bytes
# relayctl sent a host, from the receipts, and the CPU the whole machine
# spent in each run (the lab hosts share its cores, so that is a floor
# under the wall time).
# Prints medians and ratios, never asserts on a time (ratios in one run, no timed assertions). See
# docs/bench-apply.md.
#
# Needs root (the lab: sshd, mount and network namespaces) and changes the
# machine's global net.core.rmem_max/rmem_default: it takes the same lock as
# the Go tests (/tmp/relayctl-global-sysctl.lock), and restores the values
# it found at exit.
#
# Settings (environment):
#   RUNS=5        timed runs per tool and host count
#   HOSTS=20      lab hosts, or a list ("10 20 60") for a scale curve; every
#                 tool runs HOSTS-wide (--parallel, -p, -f)
#   QUICK=1       RUNS=1 HOSTS=3, for development
#   MITOGEN=1     also time the full job under ansible-mitogen (0: skip)
#   ANSIBLE=0     skip the Ansible rows (e.g. to profile an older commit)
#   STABLE_FOR=0  every relayctl apply's --stable-for: 0, one read-back,
#                 the job its peers do (they judge one reading too);
#                 STABLE_FOR=10s, relayctl's default, against it is what
#                 holding each host until its relay has stayed up costs
#                 (docs/cli.md); empty: relayctl's default
#   RTT_MS=N      a network round trip of N ms between every tool and the
#                 lab hosts, as to hosts in another region: every tool
#                 reaches the hosts through delayproxy (internal/cmd), which
#                 holds each byte back N/2 ms each way (this kernel has no
#                 netem); default 0: loopback as it is
#   PROFILE=1     after the timed runs of each host count, one more full
#                 apply and one staged apply, untimed, under `perf record -a`
#                 (CPU by process name, host side included) and with
#                 relayctl's own CPU profile (RELAYCTL_CPUPROFILE, where the
#                 commit has it): RES/profile-*.txt
#   WORK=DIR      where builds, the lab and the results go (default: a new
#                 /tmp/bench-apply.XXXXXX)
#   KEEP=1        keep the lab's host trees after the run (default: only the
#                 results, receipts and logs are kept)
#   LOCK_WAIT=900 seconds to wait for the global sysctl lock
#
# Examples:
#   sudo scripts/bench-apply.sh
#   sudo QUICK=1 scripts/bench-apply.sh
#   sudo RUNS=5 HOSTS="10 20 60" scripts/bench-apply.sh
#
# Output: progress on stderr, the tables on stdout (also in
# WORK/results/table.txt).
# Exit: 0 every timed run of every tool succeeded; 1 otherwise (the tables
# still print, failures are counted and excluded from the medians).
set -euo pipefail

if [ "${QUICK:-0}" = 1 ]; then
	RUNS=${RUNS:-1}
	HOSTS=${HOSTS:-3}
fi
RUNS=${RUNS:-5}
HOSTS=${HOSTS:-20}
KEEP=${KEEP:-0}
MITOGEN=${MITOGEN:-1}
ANSIBLE=${ANSIBLE:-1}
RTT_MS=${RTT_MS:-0}
case $RTT_MS in '' | *[!0-9]*) echo "bench-apply: RTT_MS must be a whole number of milliseconds" >&2; exit 2 ;; esac
PROFILE=${PROFILE:-0}
STABLE_FOR=${STABLE_FOR-0}
[ "$ANSIBLE" = 1 ] || MITOGEN=0
LOCK_WAIT=${LOCK_WAIT:-900}
case $RUNS in '' | *[!0-9]*) echo "bench-apply: RUNS must be a number" >&2; exit 2 ;; esac
[ "$RUNS" -ge 1 ] || { echo "bench-apply: RUNS must be at least 1" >&2; exit 2; }
SIZES=()
for n in $HOSTS; do
	case $n in '' | *[!0-9]*) echo "bench-apply: HOSTS must be numbers, e.g. 20 or \"10 20 60\"; got $n" >&2; exit 2 ;; esac
	[ "$n" -ge 1 ] || { echo "bench-apply: a host count must be at least 1" >&2; exit 2; }
	SIZES+=("$n")
done
[ ${#SIZES[@]} -ge 1 ] || { echo "bench-apply: HOSTS is empty" >&2; exit 2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
. scripts/demo-lib.sh

# What relaylab writes to /etc/relay/relayd.env (lab.DefaultRelayConfig).
LAB_RELAY_CONFIG=$'RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=127.0.0.1:7789\n'
INCIDENT=212992 # the kernel default of the incident: rmem_max and rmem_default
TARGET=8388608  # the spec's net.core.rmem_max
SO_RCVBUF=4194304
WANT_RB=8388608 # what the kernel reports for SO_RCVBUF 4194304 (doubled)
GLOBAL_KEYS="net.core.rmem_max net.core.rmem_default net.core.wmem_max net.core.wmem_default"

log() { printf 'bench-apply: %s\n' "$*" >&2; }
die() { printf 'bench-apply: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (lab hosts: sshd, namespaces; global sysctls)"

# --- prerequisites ----------------------------------------------------------
./scripts/lab-deps.sh >&2 # sshd, ssh, iproute2, util-linux, procps
need_pkgs=()
command -v parallel-ssh >/dev/null || need_pkgs+=(pssh)
[ "$ANSIBLE" != 1 ] || command -v ansible-playbook >/dev/null || need_pkgs+=(ansible)
[ "$PROFILE" != 1 ] || command -v perf >/dev/null || need_pkgs+=(linux-perf)
[ -x /usr/bin/time ] || need_pkgs+=(time)
command -v flock >/dev/null || need_pkgs+=(util-linux)
if [ "$MITOGEN" = 1 ] && ! /usr/bin/python3 -c 'import ansible_mitogen' 2>/dev/null; then need_pkgs+=(ansible-mitogen); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]} with apt-get"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
[ "$ANSIBLE" != 1 ] || ansible-doc ansible.posix.sysctl >/dev/null 2>&1 ||
	die "ansible.posix.sysctl not found (Debian's ansible package bundles it; else: ansible-galaxy collection install ansible.posix)"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 missing (ansible's modules run with it on the hosts)"
command -v go >/dev/null || die "go not found"
MITOGEN_PLUGINS=""
if [ "$MITOGEN" = 1 ]; then
	MITOGEN_PLUGINS=$(/usr/bin/python3 -c 'import ansible_mitogen, os; print(os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy"))') ||
		die "ansible_mitogen not importable (apt-get install ansible-mitogen, or MITOGEN=0)"
fi

WORK=${WORK:-$(mktemp -d /tmp/bench-apply.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
RES_ALL=$WORK/results
mkdir -p "$RES_ALL"

# --- build ------------------------------------------------------------------
# Releases are built as they ship (make build: static, -trimpath, -s -w).
log "building bin/relayctl, relayd 1.7.0 and 1.8.0, relaylab (in $WORK)"
REV=$(git describe --tags --always --dirty 2>/dev/null || echo devel)
# What was measured: the commit, and any uncommitted change in the tree.
{ git rev-parse HEAD; git status --short --untracked-files=no; } >"$RES_ALL/git.txt" 2>/dev/null || true
mkdir -p bin
build_tool ./cmd/relayctl bin/relayctl "$REV"
build_release 1.7.0 "$WORK/relayd-1.7.0"
build_release 1.8.0 "$WORK/relayd-1.8.0"
build_tool ./internal/cmd/relaylab "$WORK/relaylab"
build_tool ./internal/cmd/delayproxy "$WORK/delayproxy"
RELAYCTL=$REPO/bin/relayctl
RELAYLAB=$WORK/relaylab
# relayctl's cache of the releases it shipped (package wire), the bench's
# own: 1.7.0 in it, as if relayctl had shipped it (the base of the
# upgrade's patch; the layout is wire.Cache's, folders 0700, files 0600).
export XDG_CACHE_HOME=$WORK/cache
SHA_OLD=$(sha256sum "$WORK/relayd-1.7.0" | cut -d' ' -f1)
install -d -m 0700 "$XDG_CACHE_HOME" "$XDG_CACHE_HOME/relayctl" "$XDG_CACHE_HOME/relayctl/releases"
install -m 0600 "$WORK/relayd-1.7.0" "$XDG_CACHE_HOME/relayctl/releases/$SHA_OLD"
RELEASE_SHA1=$(sha1sum "$WORK/relayd-1.8.0" | cut -d' ' -f1)
RELEASE_MIB=$(awk -v b="$(command stat -c %s "$WORK/relayd-1.8.0")" 'BEGIN { printf "%.1f", b / 1048576 }')

# --- the global sysctls: lock, save, restore at exit ------------------------
# (sysctl_read, sysctl_set and the kernel_lock_* functions come from
# scripts/demo-lib.sh)

kernel_lock_open bench-apply || exit 1
# shellcheck disable=SC2154 # kernel_lock_open (demo-lib.sh) sets kernel_lock_fd
kernel_lock_take "$kernel_lock_fd" bench-apply "$LOCK_WAIT" || exit 1
kernel_lock_record "$kernel_lock_fd" "$0"
declare -A SAVED
for k in $GLOBAL_KEYS; do SAVED[$k]=$(sysctl_read "$k"); done

# The network's round trip (RTT_MS): a delayproxy in front of every lab
# sshd, at 127.0.1.N:2222, and an ssh_config and known_hosts that name it.
PROXY_PID=""
proxy_on() {
	[ "$RTT_MS" != 0 ] || return 0
	local half pairs
	half=$(awk -v r="$RTT_MS" 'BEGIN { printf "%.1f", r / 2 }')
	pairs=$(/usr/bin/python3 - "$LAB/lab.json" <<'PY'
import json, sys
for i, h in enumerate(json.load(open(sys.argv[1]))["hosts"]):
    print("127.0.1.%d:2222=%s" % (i + 1, h["addr"]))
PY
)
	# shellcheck disable=SC2086 # one LISTEN=TARGET a word
	"$WORK/delayproxy" -delay "${half}ms" $pairs 2>>"$RES/delayproxy.log" &
	PROXY_PID=$!
	/usr/bin/python3 - "$LAB" <<'PY'
import json, re, sys
lab = sys.argv[1]
hosts = json.load(open(lab + "/lab.json"))["hosts"]
proxy = {"[%s]:%d" % (h["host_name"], h["port"]): "[127.0.1.%d]:2222" % (i + 1) for i, h in enumerate(hosts)}
with open(lab + "/known_hosts") as f, open(lab + "/known_hosts.rtt", "w") as out:
    for line in f:
        host, rest = line.split(" ", 1)
        out.write(" ".join([",".join(proxy.get(x, x) for x in host.split(",")), rest]))
names = {h["name"]: i + 1 for i, h in enumerate(hosts)}
cur = None
with open(lab + "/ssh_config") as f, open(lab + "/ssh_config.rtt", "w") as out:
    for line in f:
        m = re.match(r"Host (\S+)", line)
        if m:
            cur = names.get(m.group(1))
        if cur and line.strip().startswith("HostName "):
            line = "  HostName 127.0.1.%d\n" % cur
        elif cur and line.strip().startswith("Port "):
            line = "  Port 2222\n"
        elif line.strip().startswith("UserKnownHostsFile "):
            line = "  UserKnownHostsFile %s/known_hosts.rtt\n" % lab
        out.write(line)
PY
	SSH_CONFIG=$LAB/ssh_config.rtt
	KNOWN_HOSTS=$LAB/known_hosts.rtt
	log "every tool reaches the lab hosts through delayproxy: ${half} ms each way (a ${RTT_MS} ms round trip)"
}
proxy_off() {
	[ -n "$PROXY_PID" ] || return 0
	kill "$PROXY_PID" 2>/dev/null
	wait "$PROXY_PID" 2>/dev/null || true # killed: 143
	PROXY_PID=""
}

LAB=""
lab_down() {
	[ -n "$LAB" ] && [ -f "$LAB/lab.json" ] || return 0
	log "stopping the lab in $LAB"
	"$RELAYLAB" down --dir "$LAB" >&2 || { log "relaylab down failed: the lab in $LAB may still run"; return 1; }
	if [ "$KEEP" != 1 ]; then rm -rf "$LAB"; fi
}
cleanup() {
	local rc=$? k
	trap - EXIT INT TERM
	set +e
	proxy_off
	lab_down || rc=1
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
	kernel_lock_clear "$kernel_lock_fd"
	flock -u "$kernel_lock_fd"
	log "results in $RES_ALL"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for k in net.core.rmem_max net.core.rmem_default; do
	log "changing the machine's $k: ${SAVED[$k]} -> $INCIDENT for the bench (restored at exit)"
	sysctl_set "$k" "$INCIDENT"
done

# --- per host count: the lab, its spec, Ansible's and pssh's files ----------
# setup_size N: start N lab hosts with relayd 1.7.0 running and write the
# tools' inputs into $SW (the size's work folder).
setup_size() {
	local n=$1 i
	SW=$WORK/hosts-$n
	RES=$RES_ALL/hosts-$n
	LAB=$SW/lab
	mkdir -p "$SW" "$RES"
	log "starting $n lab hosts with relayd 1.7.0 running"
	"$RELAYLAB" up --dir "$LAB" --hosts "$n" --relayd "$WORK/relayd-1.7.0" --relay-version 1.7.0 >"$RES/lab-up.txt"
	SSH_CONFIG=$LAB/ssh_config
	KNOWN_HOSTS=$LAB/known_hosts
	IDENTITY=$LAB/id_ed25519
	proxy_on
	NAMES=()
	for i in $(seq 1 "$n"); do NAMES+=("lab-$i"); done

	# The spec, as in cmd/relayctl/lab_test.go.
	SPEC=$SW/bench.yaml
	{
		printf 'name: bench-apply\nhosts:\n'
		for i in "${NAMES[@]}"; do printf '  - %s\n' "$i"; done
		cat <<YAML
sysctl:
  net.core.rmem_max: $TARGET
relay:
  port: 7788
  so_rcvbuf: $SO_RCVBUF
  release:
    version: 1.8.0
    artifact: $WORK/relayd-1.8.0
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
YAML
	} >"$SPEC"

	# pssh's host list, ansible's inventory and config.
	printf '%s\n' "${NAMES[@]}" >"$SW/hosts"
	{
		printf '[lab]\n'
		printf '%s\n' "${NAMES[@]}"
	} >"$SW/inventory"
	cat >"$SW/ansible.cfg" <<CFG
[defaults]
inventory = $SW/inventory
forks = $n
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
CFG
	# The same config with mitogen's strategy (it keeps one connection a
	# host for the whole play and runs modules in a persistent interpreter).
	sed "s|^\\[defaults\\]|[defaults]\\nstrategy_plugins = $MITOGEN_PLUGINS\\nstrategy = mitogen_linear|" \
		"$SW/ansible.cfg" >"$SW/ansible-mitogen.cfg"
}

# The smaller job: the sysctl and a restart.
cat >"$WORK/small.yml" <<YAML
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
YAML
SMALL_RECAP="ok=2 +changed=2"

# The same job as relayctl apply, as a careful Ansible user would write it:
# the release copied and its checksum checked, the relay config and the
# sysctl drop-in written, the sysctl set, the symlink switched, one restart,
# then the socket's rb read back with ss in the relay's network namespace
# (a lab host's relay has its own; sshd runs outside it) and asserted. Not done (relayctl does): observing
# first, a journal and backups to roll back, a canary, the stale-plan check.
cat >"$WORK/full.yml" <<YAML
- name: the incident's fix, the whole job
  hosts: lab
  gather_facts: false
  tasks:
    - name: release folder
      ansible.builtin.file:
        path: /opt/relay/releases/1.8.0
        state: directory
        mode: "0755"
    - name: copy the release, checked
      ansible.builtin.copy:
        src: $WORK/relayd-1.8.0
        dest: /opt/relay/releases/1.8.0/relayd
        mode: "0755"
        checksum: "$RELEASE_SHA1"
    - name: relay config
      ansible.builtin.copy:
        dest: /etc/relay/relayd.env
        mode: "0644"
        content: |
          RELAYD_LISTEN=0.0.0.0:7788
          RELAYD_CONTROL=127.0.0.1:7789
          RELAYD_SO_RCVBUF=$SO_RCVBUF
          RELAYD_SO_RCVBUF_FORCE=false
    - name: set net.core.rmem_max, persisted in a drop-in
      ansible.posix.sysctl:
        name: net.core.rmem_max
        value: "$TARGET"
        sysctl_set: true
        sysctl_file: /etc/sysctl.d/90-ansible.conf
    - name: switch the release
      ansible.builtin.file:
        src: releases/1.8.0
        dest: /opt/relay/current
        state: link
        force: true
    - name: restart the relay
      ansible.builtin.command: /opt/relay/bin/relay-service restart
    - name: read the socket back, in the relay's network namespace
      ansible.builtin.shell: nsenter -t "\$(cat /opt/relay/run/relayd.pid)" -n ss -Hulnm sport = :7788
      register: ss
      changed_when: false
    - name: assert rb
      ansible.builtin.assert:
        that: "'rb$WANT_RB,' in ss.stdout"
        fail_msg: "relay socket not at rb$WANT_RB: {{ ss.stdout }}"
YAML
FULL_RECAP="ok=8 +changed=6"

# --- reset to the pre-apply state (not timed) -------------------------------
# Each host's private trees are directories on the machine (lab-N/root,
# bind-mounted into the host's sshd): put back what relaylab up left there,
# then restart relayd 1.7.0 on every host through relay-service. With
# "kept", each host's release store holds 1.7.0, as relayctl's apply of it
# would have left it.
reset_hosts() {
	local n r kept=${1:-}
	sysctl_set net.core.rmem_max "$INCIDENT"
	sysctl_set net.core.rmem_default "$INCIDENT"
	for n in "${NAMES[@]}"; do
		r=$LAB/$n/root
		rm -f "$r/etc/sysctl.d/90-relayctl.conf" "$r/etc/sysctl.d/90-relayctl.conf.relayctl-new" "$r/etc/sysctl.d/90-ansible.conf"
		# The release and relayctl's store of releases by content (a
		# staged or earlier upload would otherwise be reused).
		rm -rf "$r/opt/relay/releases/1.8.0" "$r/opt/relay/releases/.sha256"
		[ -z "$kept" ] || install -D -m 0755 "$WORK/relayd-1.7.0" "$r/opt/relay/releases/.sha256/$SHA_OLD/relayd"
		ln -sfn releases/1.7.0 "$r/opt/relay/current"
		printf '%s' "$LAB_RELAY_CONFIG" >"$r/etc/relay/relayd.env"
		# The state folder, but for relayctl's host agent: a host keeps
		# it from its first contact (the first plan of run 1 sends it).
		find "$r/var/lib/relayctl" -mindepth 1 -maxdepth 1 ! -name agent -exec rm -rf {} +
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
# busy_ticks: the CPU time the whole machine has spent busy since boot, in
# clock ticks (/proc/stat's cpu line: all but idle and iowait).
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
TICKS=$(getconf CLK_TCK)

# timed NAME RUN CMD...: run CMD under /usr/bin/time -v with stdout and
# stderr in RES/NAME-RUN.{out,err}; append "RUN WALL_S MAXRSS_KB RC CPU_S
# MACHINE_CPU_S" to RES/NAME.tsv. Wall time is the difference of date
# +%s%N around it (GNU time prints only centiseconds); CPU is user +
# system of the process and its children; machine CPU is what every
# process on the machine spent meanwhile (the lab hosts' sshds, shells and
# relays are not the tool's children).
timed() {
	local name=$1 run=$2 t0 t1 b0 b1 rc=0 rss wall cpu mcpu
	shift 2
	b0=$(busy_ticks)
	t0=$(date +%s%N)
	/usr/bin/time -v -o "$RES/$name-$run.time" "$@" >"$RES/$name-$run.out" 2>"$RES/$name-$run.err" || rc=$?
	t1=$(date +%s%N)
	b1=$(busy_ticks)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
	mcpu=$(awk -v a="$b0" -v b="$b1" -v hz="$TICKS" 'BEGIN { printf "%.2f", (b - a) / hz }')
	rss=$(sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$RES/$name-$run.time")
	cpu=$(awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$RES/$name-$run.time")
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$wall" "${rss:-0}" "$rc" "$cpu" "$mcpu" >>"$RES/$name.tsv"
	TIMED_RC=$rc TIMED_WALL=$wall
}

# mark_failed NAME RUN WHY: the run does not count in the medians.
FAILURES=0
mark_failed() {
	FAILURES=$((FAILURES + 1))
	printf '%s\t%s\n' "$2" "$3" >>"$RES/$1.failed"
	log "run $2: $1 FAILED: $3"
}
# not_run NAME RUN WHY: a run that could not start (its input failed).
not_run() {
	printf '%s\t0\t0\t-1\t0\t0\n' "$2" >>"$RES/$1.tsv"
	mark_failed "$1" "$2" "$3"
}

# check_receipt FILE: every host applied, else print each host's outcome,
# state and reason from the receipt.
check_receipt() {
	/usr/bin/python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [h for h in r["hosts"] if h.get("outcome") != "applied"]
for h in bad:
    print("%s: %s (%s): %s" % (h["host"], h.get("outcome"), h.get("state"), h.get("reason", "")))
sys.exit(1 if bad or not r["hosts"] else 0)
PY
}

# receipt_rows NAME RUN FILE: append to RES/NAME-hosts.tsv, per host, "RUN
# HOST CANARY WINDOW_MS ROUND_TRIPS BYTES_UPLOADED PHASE=START+MS... FORM
# RELEASE_BYTES", the host's timeline from its receipt (ms since the host's
# own start), and the form and bytes its release went in (- 0: not sent).
receipt_rows() {
	/usr/bin/python3 - "$2" "$3" >>"$RES/$1-hosts.tsv" <<'PY'
import json, sys
for i, h in enumerate(json.load(open(sys.argv[2]))["hosts"]):
    tl = " ".join("%s=%d+%d" % (p["name"], p.get("start_ms", 0), p.get("ms", 0)) for p in h.get("timeline") or [])
    up = h.get("upload") or {}
    print("\t".join(str(x) for x in (sys.argv[1], h["host"], int(i == 0), h.get("window_ms", 0),
                                      h.get("round_trips", 0), h.get("bytes_uploaded", 0), tl, up.get("form", "-"), up.get("bytes", 0))))
PY
}

# run_relayctl_apply NAME RUN PLAN [FLAGS...]: time relayctl apply PLAN
# and check it.
run_relayctl_apply() {
	local name=$1 run=$2 plan=$3 why="" bad got
	shift 3
	timed "$name" "$run" "$RELAYCTL" apply "$plan" --parallel "${#NAMES[@]}" \
		--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY" ${STABLE_FOR:+--stable-for "$STABLE_FOR"} "$@"
	cp "$plan.receipt.json" "$RES/$name-$run.receipt.json" 2>/dev/null || true
	cp "$plan.receipt.md" "$RES/$name-$run.receipt.md" 2>/dev/null || true
	receipt_rows "$name" "$run" "$plan.receipt.json" 2>/dev/null || true
	[ "$TIMED_RC" = 0 ] || why="exit $TIMED_RC"
	if ! bad=$(check_receipt "$plan.receipt.json" 2>&1); then
		why="${why:+$why; }receipt: $(printf '%s' "$bad" | paste -sd ';' -)"
	fi
	got=$(sysctl_read net.core.rmem_max)
	[ "$got" = "$TARGET" ] || why="${why:+$why; }rmem_max read back $got, want $TARGET"
	if [ -n "$why" ]; then mark_failed "$name" "$run" "$why"; else log "run $run: $name ${TIMED_WALL}s"; fi
}

# run_plan RUN PLAN NAME: time relayctl plan (exit 2: changes).
run_plan() {
	timed "$3" "$1" "$RELAYCTL" plan "$SPEC" --out "$2" --detailed-exitcode --parallel "${#NAMES[@]}" \
		--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY"
	if [ "$TIMED_RC" != 2 ]; then
		mark_failed "$3" "$1" "exit $TIMED_RC, want 2 (changes); see $RES/$3-$1.err"
		return 1
	fi
	log "run $1: $3 ${TIMED_WALL}s"
}

# run_ansible NAME RUN CFG PLAY RECAP: time ansible-playbook and check its
# recap on every host, and rmem_max.
run_ansible() {
	local name=$1 run=$2 cfg=$3 play=$4 recap=$5 why="" ok got s
	local cpdir=$SW/cp-$name-$run
	mkdir -p "$cpdir"
	ANSIBLE_CONFIG=$cfg ANSIBLE_SSH_CONTROL_PATH_DIR=$cpdir ANSIBLE_FORCE_COLOR=0 \
		timed "$name" "$run" ansible-playbook -i "$SW/inventory" -f "${#NAMES[@]}" "$play"
	# Close the persistent connections, so the next run starts cold as well.
	for s in "$cpdir"/*; do [ -S "$s" ] && ssh -o ControlPath="$s" -O exit dummy >/dev/null 2>&1; done || true
	[ "$TIMED_RC" = 0 ] || why="exit $TIMED_RC"
	ok=$(grep -cE "^lab-[0-9]+ +: $recap +unreachable=0 +failed=0" "$RES/$name-$run.out" || true)
	[ "$ok" = "${#NAMES[@]}" ] || why="${why:+$why; }$ok of ${#NAMES[@]} hosts ${recap//+/} in the recap"
	got=$(sysctl_read net.core.rmem_max)
	[ "$got" = "$TARGET" ] || why="${why:+$why; }rmem_max read back $got, want $TARGET"
	if [ -n "$why" ]; then mark_failed "$name" "$run" "$why; see $RES/$name-$run.out"; else log "run $run: $name ${TIMED_WALL}s"; fi
}

# --- the table --------------------------------------------------------------
# succeeded NAME COL: column COL of NAME's runs that succeeded, sorted.
succeeded() {
	local f=$RES/$1.tsv failed=$RES/$1.failed
	[ -f "$f" ] || return 0
	awk -F'\t' -v failed="$failed" -v col="$2" '
		BEGIN { while ((getline l < failed) > 0) { split(l, a, "\t"); bad[a[1]] = 1 } }
		!($1 in bad) && $4 != "-1" { print $col }' "$f" | sort -n
}
# median_of: the median of the numbers on stdin, "-" if none.
median_of() {
	awk '{ v[NR] = $1 }
		END {
			if (NR == 0) { print "-"; exit }
			printf "%.2f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		}'
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
# peak NAME: the largest max RSS (MiB) over the succeeded runs.
peak() { succeeded "$1" 3 | awk 'END { if (NR == 0) print "-"; else printf "%.1f\n", $1 / 1024 }'; }
# cpu NAME: the median CPU seconds (user + system, with children).
cpu() { succeeded "$1" 5 | median_of; }
# machine_cpu NAME: the median CPU seconds the whole machine spent.
machine_cpu() { succeeded "$1" 6 | median_of; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
sum() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-"; else print a + b }'; }

# table_size N: the table of one host count; also appends the size's
# medians to RES_ALL/curve.tsv.
table_size() {
	local n=$1 name label med mn mx cnt
	local rows=(
		"relayctl-apply|relayctl apply (full: upload included)"
		"relayctl-apply-patch|  the same, an upgrade (patch from 1.7.0)"
		"relayctl-stage|relayctl stage (the day before)"
		"relayctl-apply-staged|relayctl apply (release staged)"
		"relayctl-apply-nocanary|  the same, --waves 100% (no canary)"
		"relayctl-plan|relayctl plan"
	)
	if [ "$ANSIBLE" = 1 ]; then rows+=("ansible-full|ansible-playbook, same job"); fi
	if [ "$MITOGEN" = 1 ]; then rows+=("ansible-mitogen|ansible-playbook, same job, mitogen"); fi
	if [ "$ANSIBLE" = 1 ]; then rows+=("ansible-small|ansible-playbook, sysctl+restart"); fi
	rows+=("pssh|parallel-ssh true")
	printf '%s hosts, %s runs, every tool %s-wide; release %s MiB; relayctl apply --stable-for %s\n' "$n" "$RUNS" "$n" "$RELEASE_MIB" "${STABLE_FOR:-10s (its default)}"
	printf '%-40s %8s %8s %8s %5s %7s %9s %8s\n' "wall time, seconds" median min max ok "CPU s" "machine*" "RSS MiB*"
	declare -A MED MCPU
	for row in "${rows[@]}"; do
		name=${row%%|*} label=${row#*|}
		read -r med mn mx cnt <<<"$(stat "$name")"
		MED[$name]=$med MCPU[$name]=$(machine_cpu "$name")
		printf '%-40s %8s %8s %8s %5s %7s %9s %8s\n' "$label" "$med" "$mn" "$mx" "$cnt/$RUNS" "$(cpu "$name")" "${MCPU[$name]}" "$(peak "$name")"
	done
	printf 'ratios of medians\n'
	printf '  relayctl apply (full) / parallel-ssh             %s   (target <= 2.5)\n' "$(ratio "${MED[relayctl-apply]}" "${MED[pssh]}")"
	printf '  relayctl apply (full, a patch) / parallel-ssh    %s\n' "$(ratio "${MED[relayctl-apply-patch]}" "${MED[pssh]}")"
	printf '  relayctl apply (staged) / parallel-ssh           %s   (target <= 1.5)\n' "$(ratio "${MED[relayctl-apply-staged]}" "${MED[pssh]}")"
	printf '  relayctl apply (staged, no canary) / parallel-ssh %s\n' "$(ratio "${MED[relayctl-apply-nocanary]}" "${MED[pssh]}")"
	printf '  relayctl apply (full) / ansible, same job        %s\n' "$(ratio "${MED[relayctl-apply]}" "${MED[ansible-full]:--}")"
	printf '  ansible, same job / relayctl apply (full)        %s   (target >= 10)\n' "$(ratio "${MED[ansible-full]:--}" "${MED[relayctl-apply]}")"
	if [ "$MITOGEN" = 1 ]; then
		printf '  relayctl apply (full) / ansible+mitogen, same job %s\n' "$(ratio "${MED[relayctl-apply]}" "${MED[ansible-mitogen]}")"
	fi
	printf '  relayctl apply (full) / ansible, sysctl+restart  %s\n' "$(ratio "${MED[relayctl-apply]}" "${MED[ansible-small]:--}")"
	printf '  (relayctl plan + apply) / ansible, same job      %s\n' "$(ratio "$(sum "${MED[relayctl-apply]}" "${MED[relayctl-plan]}")" "${MED[ansible-full]:--}")"
	# Where the lab is CPU-bound the wall time follows the CPU every host
	# spends on the machine's cores: the machine's CPU for a run, divided
	# by its cores, is a floor under its wall time, and the ratios of the
	# machine's CPU say how much of a wall-time ratio is work, not waiting.
	printf 'machine CPU (every process, the hosts'"'"' included), medians\n'
	for row in "relayctl-apply|full apply" "relayctl-apply-staged|staged apply" "pssh|parallel-ssh true"; do
		name=${row%%|*}
		printf '  %-20s %7s CPU s, %6s s on %s cores (wall %s s)\n' "${row#*|}" "${MCPU[$name]}" \
			"$(ratio "${MCPU[$name]}" "$CPUS")" "$CPUS" "${MED[$name]}"
	done
	printf '  full / parallel-ssh   %s (wall %s)\n' "$(ratio "${MCPU[relayctl-apply]}" "${MCPU[pssh]}")" "$(ratio "${MED[relayctl-apply]}" "${MED[pssh]}")"
	printf '  staged / parallel-ssh %s (wall %s)\n' "$(ratio "${MCPU[relayctl-apply-staged]}" "${MCPU[pssh]}")" "$(ratio "${MED[relayctl-apply-staged]}" "${MED[pssh]}")"
	bytes_table
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "${MED[relayctl-apply]}" "${MED[relayctl-apply-staged]}" "${MED[relayctl-plan]}" \
		"${MED[ansible-full]:--}" "${MED[ansible-mitogen]:--}" "${MED[pssh]}" >>"$RES_ALL/curve.tsv"
	# Per-host phases from the receipts (medians, ms since the host's start).
	for name in relayctl-apply relayctl-apply-patch relayctl-apply-staged relayctl-apply-nocanary; do
		[ -s "$RES/$name-hosts.tsv" ] || continue
		/usr/bin/python3 - "$RES/$name-hosts.tsv" "$name" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if int(r[3]) > 0]
if not rows:
    sys.exit(0)
med = lambda xs: int(statistics.median(xs)) if xs else 0
print("%s, from the receipts (%d host-runs): window median %d ms, max %d ms; %d round trips a host; %d bytes uploaded a host (median)"
      % (sys.argv[2], len(rows), med([int(r[3]) for r in rows]), max(int(r[3]) for r in rows),
         med([int(r[4]) for r in rows]), med([int(r[5]) for r in rows])))
for label, group in (("canary", [r for r in rows if r[2] == "1"]), ("others", [r for r in rows if r[2] == "0"])):
    if not group:
        continue
    phases = {}
    for r in group:
        for p in (r[6].split() if len(r) > 6 else []):
            name, v = p.split("=")
            start, ms = v.split("+")
            phases.setdefault(name, []).append((int(start), int(ms)))
    order = sorted(phases, key=lambda k: med([s for s, _ in phases[k]]))
    print("  %-7s %s" % (label, "  ".join("%s %d+%d" % (k, med([s for s, _ in phases[k]]), med([m for _, m in phases[k]])) for k in order)))
PY
	done
	printf '  (phase START+MS: median ms from the host'"'"'s start, and its duration)\n'
}

# bytes_table: what relayctl sent a host, from the receipts (medians over
# the host-runs of the runs that succeeded): in all, and of it the
# release, in which form; Ansible's copy sends the release whole.
bytes_table() {
	local name label
	printf 'bytes sent a host (median, from the receipts; the release is %s bytes)\n' "$(command stat -c %s "$WORK/relayd-1.8.0")"
	for row in "relayctl-apply|relayctl apply (full)" "relayctl-apply-patch|relayctl apply (full, an upgrade)" \
		"relayctl-stage|relayctl stage" "relayctl-apply-staged|relayctl apply (release staged)"; do
		name=${row%%|*} label=${row#*|}
		[ -s "$RES/$name-hosts.tsv" ] || continue
		/usr/bin/python3 - "$RES/$name-hosts.tsv" "$label" "$(command stat -c %s "$WORK/relayd-1.8.0")" "$RES/$name.failed" <<'PY'
import collections, os, statistics, sys
failed = {l.split("\t")[0] for l in open(sys.argv[4])} if os.path.exists(sys.argv[4]) else set()
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r[0] not in failed and len(r) >= 9]
if not rows:
    sys.exit(0)
size = int(sys.argv[3])
sent, release = statistics.median(int(r[5]) for r in rows), statistics.median(int(r[8]) for r in rows)
forms = collections.Counter(r[7] for r in rows)
print("  %-34s %10d (%5.1f%% of the release); the release %d (%s)" % (sys.argv[2], sent, 100 * sent / size, release,
      ", ".join("%s %d" % (f if f != "-" else "not sent", n) for f, n in sorted(forms.items()))))
PY
	done
	if [ "$ANSIBLE" = 1 ]; then
		printf '  %-34s %10s (copy sends the release whole, unless the host holds it by sha1)\n' "ansible-playbook, same job" "$(command stat -c %s "$WORK/relayd-1.8.0")"
	fi
}

# profile_apply full|staged: one more apply (untimed) under perf record -a,
# and relayctl's CPU profile; writes RES/profile-KIND.txt: CPU seconds by
# process name over the whole machine (the hosts' sshd, shells and tools,
# the relays, relayctl), and relayctl's top functions.
profile_apply() {
	local kind=$1 plan=$SW/profile-$1.plan pp=$RES/profile-$1.pprof data=$RES/profile-$1.perf
	local t0 t1 rc=0
	reset_hosts
	"$RELAYCTL" plan "$SPEC" --out "$plan" --detailed-exitcode --parallel "${#NAMES[@]}" \
		--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY" >/dev/null 2>&1 || rc=$?
	[ "$rc" = 2 ] || { log "profile: relayctl plan exited $rc, want 2: no $kind profile"; return 0; }
	rc=0
	if [ "$kind" = staged ]; then
		"$RELAYCTL" stage "$plan" --parallel "${#NAMES[@]}" \
			--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY" >/dev/null 2>&1 ||
			{ log "profile: relayctl stage failed (not in this commit?): no staged profile"; return 0; }
	fi
	t0=$(date +%s%N)
	# shellcheck disable=SC2086 # STABLE_FOR: as the timed runs have it
	RELAYCTL_CPUPROFILE=$pp perf record -q -a -e cpu-clock -F 499 -e sched:sched_process_exec -o "$data" -- "$RELAYCTL" apply "$plan" --parallel "${#NAMES[@]}" \
		--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY" ${STABLE_FOR:+--stable-for "$STABLE_FOR"} >"$RES/profile-$kind.out" 2>&1 || rc=$?
	t1=$(date +%s%N)
	{
		printf '\nprofile, %s apply on %s hosts (untimed run under perf: %.2f s, exit %d)\n' "$kind" "${#NAMES[@]}" \
			"$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')" "$rc"
		printf '  CPU by process name, whole machine (perf cpu-clock samples at 499 Hz; seconds):\n'
		perf report -i "$data" --sort comm --stdio -F period,comm 2>/dev/null | awk '
			/^# Samples: .* of event / { ev = $NF; next }
			/^#/ || NF < 2 || ev != "\047cpu-clock\047" { next }
			{ sum += $1; n[NR] = $2; p[NR] = $1 }
			END { for (i in p) if (p[i] / sum >= 0.01) printf "    %-16s %6.2f s  %4.1f%%\n", n[i], p[i] / 1e9, 100 * p[i] / sum
			      printf "    %-16s %6.2f s\n", "(all)", sum / 1e9 }' | sort -k2 -rn
		# Every program started on the machine during the apply (the
		# tracepoint names the program after its exec), a host's share.
		printf '  programs started (exec), whole machine, and per host:\n'
		perf report -i "$data" --sort comm --stdio -F period,comm 2>/dev/null | awk -v hosts="${#NAMES[@]}" '
			/^# Samples: .* of event / { ev = $NF; next }
			/^#/ || NF < 2 || ev != "\047sched:sched_process_exec\047" { next }
			{ sum += $1; n[NR] = $2; p[NR] = $1 }
			END { for (i in p) if (p[i] / sum >= 0.02) printf "    %-16s %6d  %6.1f a host\n", n[i], p[i], p[i] / hosts
			      printf "    %-16s %6d  %6.1f a host\n", "(all)", sum, sum / hosts }' | sort -k2 -rn
		if [ -s "$pp" ]; then
			printf '  relayctl, top functions (go tool pprof -top):\n'
			go tool pprof -top -nodecount=12 "$pp" 2>>"$RES/pprof.err" | sed -n '/flat%/,$p' | sed 's/^/    /'
		fi
	} >"$RES/profile-$kind.txt"
}

KERNEL=$(uname -r)
CPUS=$(nproc)
: >"$RES_ALL/curve.tsv"
TABLES=()
for n in "${SIZES[@]}"; do
	setup_size "$n"
	log "machine: $CPUS CPUs, kernel $KERNEL, load $(cut -d' ' -f1-3 /proc/loadavg); $RUNS runs, $n hosts"
	LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
	for run in $(seq 1 "$RUNS"); do
		# relayctl: plan (timed on its own), then a full apply.
		reset_hosts
		plan=$SW/run-$run.plan
		if run_plan "$run" "$plan" relayctl-plan; then
			run_relayctl_apply relayctl-apply "$run" "$plan"
		else
			not_run relayctl-apply "$run" "no plan"
		fi

		# The same as a release upgrade: the hosts keep 1.7.0, which
		# relayctl shipped, and 1.8.0 goes as a zstd patch from it.
		reset_hosts kept
		plan=$SW/run-$run-patch.plan
		if run_plan "$run" "$plan" relayctl-plan-patch; then
			run_relayctl_apply relayctl-apply-patch "$run" "$plan"
		else
			not_run relayctl-apply-patch "$run" "no plan"
		fi

		# relayctl: plan, stage (the day before), then the apply.
		reset_hosts
		plan=$SW/run-$run-staged.plan
		if ! run_plan "$run" "$plan" relayctl-plan-staged; then
			not_run relayctl-stage "$run" "no plan"
			not_run relayctl-apply-staged "$run" "no plan"
		else
			timed relayctl-stage "$run" "$RELAYCTL" stage "$plan" --parallel "$n" \
				--ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" --identity "$IDENTITY"
			receipt_rows relayctl-stage "$run" "$plan.stage.json" 2>/dev/null || true
			if [ "$TIMED_RC" != 0 ]; then
				mark_failed relayctl-stage "$run" "exit $TIMED_RC; see $RES/relayctl-stage-$run.err"
				not_run relayctl-apply-staged "$run" "stage failed"
			else
				log "run $run: relayctl-stage ${TIMED_WALL}s"
				run_relayctl_apply relayctl-apply-staged "$run" "$plan"
			fi
		fi

		# The same without the canary (one wave of every host): what the
		# default's canary, alone first, costs.
		reset_hosts
		plan=$SW/run-$run-nocanary.plan
		if run_plan "$run" "$plan" relayctl-plan-nocanary &&
			"$RELAYCTL" stage "$plan" --parallel "$n" --ssh-config "$SSH_CONFIG" --known-hosts "$KNOWN_HOSTS" \
				--identity "$IDENTITY" >"$RES/relayctl-stage-nocanary-$run.out" 2>&1; then
			run_relayctl_apply relayctl-apply-nocanary "$run" "$plan" --waves 100%
		else
			not_run relayctl-apply-nocanary "$run" "plan or stage failed"
		fi

		if [ "$ANSIBLE" = 1 ]; then
			reset_hosts
			run_ansible ansible-full "$run" "$SW/ansible.cfg" "$WORK/full.yml" "$FULL_RECAP"
			if [ "$MITOGEN" = 1 ]; then
				reset_hosts
				run_ansible ansible-mitogen "$run" "$SW/ansible-mitogen.cfg" "$WORK/full.yml" "$FULL_RECAP"
			fi
			reset_hosts
			run_ansible ansible-small "$run" "$SW/ansible.cfg" "$WORK/small.yml" "$SMALL_RECAP"
		fi

		# parallel-ssh: one trivial command on every host.
		timed pssh "$run" parallel-ssh -h "$SW/hosts" -x "-F $SSH_CONFIG" -p "$n" -t 60 -i true
		why=""
		[ "$TIMED_RC" = 0 ] || why="exit $TIMED_RC"
		ok=$(grep -c '\[SUCCESS\]' "$RES/pssh-$run.out" || true)
		[ "$ok" = "$n" ] || why="${why:+$why; }$ok of $n hosts SUCCESS"
		if [ -n "$why" ]; then mark_failed pssh "$run" "$why; see $RES/pssh-$run.out"; else log "run $run: pssh ${TIMED_WALL}s"; fi
	done
	LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
	if [ "$PROFILE" = 1 ]; then
		profile_apply full
		profile_apply staged
	fi
	{
		printf '\nload average at start %s, at end %s\n' "$LOAD_START" "$LOAD_END"
		table_size "$n"
		for f in "$RES"/profile-*.txt; do [ -f "$f" ] && cat "$f"; done
	} >"$RES/table.txt"
	TABLES+=("$RES/table.txt")
	proxy_off
	lab_down
	LAB=""
done

{
	printf 'bench-apply  %s  (relayctl %s; repo %s)\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$REV" "$(git rev-parse --short HEAD)"
	printf 'machine      %s CPUs, kernel %s\n' "$CPUS" "$KERNEL"
	[ "$RTT_MS" = 0 ] || printf 'network      %s ms round trip to every lab host (delayproxy)\n' "$RTT_MS"
	dirty=$(tail -n +2 "$RES_ALL/git.txt" 2>/dev/null | awk '{ print $2 }' | paste -sd' ' -)
	[ -z "$dirty" ] || printf 'uncommitted  %s\n' "$dirty"
	cat "${TABLES[@]}"
	printf '* RSS: the largest single process of the run (ru_maxrss of the children),\n'
	printf '  not a sum: ansible forks a worker per host, pssh an ssh per host.\n'
	printf '  CPU: user + system of the tool and its children (not the hosts'"'"' sshds).\n'
	printf '  machine: CPU seconds every process on the machine spent during the run\n'
	printf '  (/proc/stat), the lab hosts'"'"' sshds, shells and relays included.\n'
	if [ "${#SIZES[@]}" -gt 1 ]; then
		printf '\nscale curve (medians, seconds)\n'
		printf '%6s %10s %10s %8s %10s %10s %8s %14s\n' hosts apply staged plan ansible mitogen pssh "apply/pssh"
		awk -F'\t' '{ r = ($7 == "-" || $7 == 0 || $2 == "-") ? "-" : sprintf("%.2f", $2 / $7)
			printf "%6s %10s %10s %8s %10s %10s %8s %14s\n", $1, $2, $3, $4, $5, $6, $7, r }' "$RES_ALL/curve.tsv"
	fi
	if [ "$FAILURES" -gt 0 ]; then
		printf '\nFAILED runs (not in the medians):\n'
		for f in "$RES_ALL"/*/*.failed; do
			[ -f "$f" ] || continue
			sed "s|^|  $(basename "$(dirname "$f")") $(basename "$f" .failed) run |" "$f"
		done
	fi
} | tee "$RES_ALL/table.txt"

[ "$FAILURES" = 0 ] || exit 1

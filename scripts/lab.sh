#!/usr/bin/env bash
# make lab, make lab-down: lab hosts that stay up, to try relayctl by hand
# (docs/lab.md): lab-1, or with HOSTS=N (make lab HOSTS=4) a fleet lab-1 to
# lab-N. Each is a real OpenSSH sshd with its own /etc/sysctl.d,
# /opt/relay, /etc/relay and /var/lib/relayctl, running relayd 1.7.0
# (which never asks for a buffer) through the generic service manager, in
# a network namespace of its own. LAB_DIR (default lab) gets what a client
# needs and ready specs:
#
#   bin/relayctl                          relayctl holding the machine-wide sysctl lock (below)
#   ssh_config, known_hosts, id_ed25519   how relayctl and ssh reach the hosts
#   lab.yaml                              the incident's fix for every host (bin/relayd 1.8.0)
#   broken.yaml, relayd-broken            a release 1.9.0 that fails at start
#   fleet.yaml, inventory.ini             HOSTS=2 or more: lab.yaml's fix for an
#                                         inventory of two regions (ash, then
#                                         fra), each in waves 1, 100%: a canary each
#   allowed_signers                       the lab key, for approve and --require-approval
#   sysctls.saved                         the values down puts back
#   ready                                 written last: up finished
#
# bin/relaylab stop --dir LAB_DIR lab-3 stops one host's sshd (relayctl
# finds it unreachable; its relay goes on), relaylab start starts it again.
#
# The kernel is this machine's: up saves net.core.rmem_max and
# rmem_default in sysctls.saved and puts them on the incident's 212,992
# bytes, as make demo does, and down puts back the saved values, each under
# the machine-wide sysctl lock the tests take. Between the two the lab does
# not hold the lock (it may stay up for hours). An apply to lab-1 changes
# the machine's rmem_max: lab/bin/relayctl, first in PATH in the next steps
# up prints, runs bin/relayctl holding the lock (scripts/lab-relayctl.sh).
#
# Both can run again, fail, or be interrupted (Ctrl-C) at any point, and
# leave the machine's values as they found them:
#   - up with a lab up says so and changes nothing;
#   - up that fails or is interrupted stops what it started and puts the
#     values back before it exits;
#   - down with no lab up says so; otherwise it stops whatever is left of
#     the lab (one stopped some other way, an up killed half way) and puts
#     back the saved values; once it holds the lock it finishes, Ctrl-C or
#     not (it takes seconds);
#   - up after either runs on a clean slate.
#
# One machine, one such lab: its hosts share the machine's kernel, and
# sysctls.saved holds the values from before it. LAB_OWNER (default
# /run/relayctl-lab.owner) names the folder of the lab up; up refuses
# while it names another folder that still holds a lab, and a lab of
# another size in the same folder (make lab-down first), changing nothing.
#
# LAB_RELAYD=PATH: the relayd the hosts run, installed as release 1.7.0
# (default: relayd 1.7.0, built from this tree). One that cannot start
# makes up fail once lab-1's sshd is up, as a test of the clean-up does.
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
lab=${LAB_DIR:-lab}
saved=$lab/sysctls.saved
owner=${LAB_OWNER:-/run/relayctl-lab.owner}
hosts=${HOSTS:-1}
maxhosts=32

need_root() {
	[ "$(id -u)" = 0 ] || { echo "lab: needs root (it starts sshd and changes net.core.rmem_max)" >&2; exit 1; }
}

# restore_saved: put back the values in sysctls.saved, then remove it. The
# file is read as data: only the two keys up saves, only numbers, all
# checked before any is written.
restore_saved() {
	local k v
	while IFS='=' read -r k v; do
		case $k in
		net.core.rmem_max | net.core.rmem_default) ;;
		*)
			echo "lab: error: $saved: $k is not a value up saves (net.core.rmem_max, net.core.rmem_default): put them back by hand and remove the file" >&2
			return 1
			;;
		esac
		case $v in '' | *[!0-9]*)
			echo "lab: error: $saved: $k=$v is not a number: put it back by hand and remove the file" >&2
			return 1
			;;
		esac
	done <"$saved"
	while IFS='=' read -r k v; do
		sysctl_set "$k" "$v" || return 1
	done <"$saved"
	rm -f "$saved"
}

lab_stop() {
	need_root
	if [ ! -e "$lab/lab.json" ] && [ ! -e "$saved" ]; then
		echo "lab: no lab is up in $lab"
		return 0
	fi
	kernel_lock lab "make lab-down ($0 down)"
	trap '' INT TERM HUP # from here on down finishes what it starts
	local rc=0 restored=''
	rm -f "$lab/ready"
	if [ -e "$lab/lab.json" ]; then
		./bin/relaylab down --dir "$lab" >/dev/null || rc=1
	fi
	if [ -e "$saved" ]; then
		restore_saved || rc=1
		restored="; restored net.core.rmem_max=$(sysctl_read net.core.rmem_max) net.core.rmem_default=$(sysctl_read net.core.rmem_default)"
	fi
	if [ "$rc" != 0 ]; then
		echo "lab: error: stopping the lab in $lab failed (above); make lab-down tries again" >&2
		return 1
	fi
	disown_machine "$(cd "$lab" && pwd -P)"
	echo "lab: stopped$restored"
}

# lab_abort: on the way out of an up that did not finish, stop what it
# started and put the values back, not to be interrupted itself.
lab_abort() {
	local rc=$?
	trap '' INT TERM HUP
	echo "lab: make lab did not finish (exit $rc): stopping what it started and putting the values back" >&2
	if [ -e "$dir/lab.json" ]; then
		./bin/relaylab down --dir "$dir" >/dev/null || rc=1
	fi
	if [ -e "$saved" ]; then
		restore_saved || rc=1
		echo "lab: restored net.core.rmem_max=$(sysctl_read net.core.rmem_max) net.core.rmem_default=$(sysctl_read net.core.rmem_default)" >&2
	fi
	[ -e "$saved" ] || disown_machine "$dir"
	exit "$rc"
}

# names N: the hosts' names, lab-1 to lab-N, one a line.
names() { seq -f 'lab-%g' 1 "$1"; }

# hosts_text N: how messages name the hosts.
hosts_text() {
	if [ "$1" = 1 ]; then echo "lab-1 is"; else echo "lab-1 … lab-$1 ($1 hosts) are"; fi
}

next_steps() {
	cat <<EOF
lab: next steps (docs/lab.md):
  cd $lab
  export PATH=\$PWD/bin:\$PATH RELAYCTL_SSH_CONFIG=\$PWD/ssh_config RELAYCTL_KNOWN_HOSTS=\$PWD/known_hosts
  relayctl plan lab.yaml --out lab.plan
lab: $lab/bin/relayctl holds the machine-wide sysctl lock while it runs a command that reads or changes the hosts' kernel, this machine's
lab: bin/relaylab stop --dir $lab lab-$hosts stops that host's sshd (relayctl finds it unreachable); relaylab start starts it again
lab: make lab-down stops the lab and puts the values back
EOF
}

# up_count: how many hosts the lab in LAB_DIR has, when it is up (every
# host running, or stopped by relaylab stop); nothing when it is not.
up_count() {
	[ -e "$lab/ready" ] && [ -e "$lab/lab.json" ] || return 0
	local st rc=0
	st=$(./bin/relaylab status --dir "$lab" 2>/dev/null) || rc=$?
	if [ "$rc" = 0 ] || { [ "$rc" = 3 ] && ! grep -q ' down$' <<<"$st"; }; then
		grep -c . <<<"$st"
	fi
}

# machine_owner: the folder of the lab up on this machine, from $owner,
# when that folder still holds one (its lab.json or its saved values).
machine_owner() {
	local d
	[ -f "$owner" ] || return 0
	d=$(head -n 1 "$owner")
	if [ -n "$d" ] && { [ -e "$d/lab.json" ] || [ -e "$d/sysctls.saved" ]; }; then
		printf '%s\n' "$d"
	fi
}

# own_machine DIR, disown_machine DIR: record, or forget, that DIR's lab
# is the one up on this machine.
own_machine() { printf '%s\n' "$1" >"$owner.new" && mv -f "$owner.new" "$owner"; }
disown_machine() {
	if [ -f "$owner" ] && [ "$(head -n 1 "$owner")" = "$1" ]; then rm -f "$owner"; fi
}

# write_specs DIR: lab.yaml and broken.yaml for every host; for two hosts
# or more, fleet.yaml over inventory.ini, two regions.
write_specs() {
	local d=$1 list
	write_fix_spec "$d/lab.yaml" lab-rcvbuf
	list=$(names "$hosts" | sed 's/^/  - /')
	awk -v list="$list" '$0 == "  - lab-1" { print list; next } { print }' "$d/lab.yaml" >"$d/lab.yaml.new"
	mv "$d/lab.yaml.new" "$d/lab.yaml"
	# The release's path, relative to the spec's folder (LAB_DIR may be anywhere).
	sed -i "s|artifact: \.\./bin/relayd|artifact: $(realpath --relative-to="$d" bin/relayd)|" "$d/lab.yaml"
	sed -e 's/^name: lab-rcvbuf$/name: lab-broken/' -e 's/version: 1\.8\.0/version: 1.9.0/' \
		-e 's|artifact: .*relayd$|artifact: relayd-broken|' \
		-e 's/^# The incident.s fix.*$/# A release that fails at start: the window rolls back to what ran before./' \
		"$d/lab.yaml" >"$d/broken.yaml"
	rm -f "$d/fleet.yaml" "$d/inventory.ini"
	[ "$hosts" -ge 2 ] || return 0
	local half=$(((hosts + 1) / 2))
	{
		echo "# lab-1 … lab-$hosts in two regions (make lab HOSTS=$hosts, docs/lab.md)."
		echo "[ash]"
		names "$half"
		echo "[fra]"
		names "$hosts" | tail -n +"$((half + 1))"
		printf '[ash:vars]\nregion=ash\n[fra:vars]\nregion=fra\n[relays:children]\nash\nfra\n'
	} >"$d/inventory.ini"
	awk '/^hosts:$/ { print "hosts:\n  inventory: inventory.ini\n  pattern: relays\n  labels: [region]"; skip = 1; next }
		skip && /^  - / { next } { skip = 0; print }' "$d/lab.yaml" |
		sed -e 's/^name: lab-rcvbuf$/name: lab-fleet/' \
			-e 's/^# The incident.s fix.*$/# The fix for the fleet: region after region (ash, then fra), a canary first in each./' >"$d/fleet.yaml"
	printf 'rollout:\n  by: region\n  order: [ash, fra]\n  waves: [1, 100%%]\n' >>"$d/fleet.yaml"
}

# check_hosts: HOSTS is a number of hosts the lab can start.
check_hosts() {
	case $hosts in '' | *[!0-9]* | 0*)
		echo "lab: error: HOSTS=$hosts: want a number of hosts from 1 to $maxhosts, e.g. make lab HOSTS=4" >&2
		exit 2
		;;
	esac
	if [ "$hosts" -gt "$maxhosts" ]; then
		echo "lab: error: HOSTS=$hosts: at most $maxhosts hosts (each is a real sshd and relay on this machine)" >&2
		exit 2
	fi
}

lab_start() {
	need_root
	check_hosts
	local n other
	n=$(up_count)
	if [ -n "$n" ] && [ "$n" = "$hosts" ]; then
		echo "lab: $(hosts_text "$n") up already in $lab; make lab-down stops it"
		next_steps
		return 0
	fi
	if [ -n "$n" ]; then
		echo "lab: error: a lab of $n host(s) is up in $lab, not $hosts: make lab-down first, then make lab HOSTS=$hosts (nothing changed)" >&2
		exit 1
	fi
	if [ -e "$lab/lab.json" ] || [ -e "$saved" ]; then
		# An up killed half way (kill -9), or a lab stopped some other
		# way than down: what is left goes first, as down does it.
		echo "lab: the lab in $lab did not finish starting or has stopped since: stopping what is left of it first" >&2
		(lab_stop) # a subshell: its lock and its trap end with it
	fi
	mkdir -p "$lab"
	dir=$(cd "$lab" && pwd -P)
	relayd=${LAB_RELAYD:-$dir/relayd-1.7.0}
	[ -n "${LAB_RELAYD:-}" ] || build_release 1.7.0 "$relayd"
	printf '#!/bin/sh\necho "relayd 1.9.0: cannot start: a deliberate failure (the lab'"'"'s broken release)" >&2\nexit 1\n' >"$dir/relayd-broken"
	chmod 0755 "$dir/relayd-broken"

	kernel_lock lab "make lab ($0 up)"
	other=$(machine_owner)
	if [ -n "$other" ] && [ "$other" != "$dir" ]; then
		echo "lab: error: a lab is up in $other: its hosts share this machine's kernel, and make lab would put net.core.rmem_max and rmem_default under them on 212,992; make lab-down LAB_DIR=$other first, or use that lab (nothing changed)" >&2
		exit 1
	fi
	trap lab_abort EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
	# Saved before anything changes: from here on, whatever happens, the
	# abort above or the next down or up finds what to put back.
	printf 'net.core.rmem_max=%s\nnet.core.rmem_default=%s\n' \
		"$(sysctl_read net.core.rmem_max)" "$(sysctl_read net.core.rmem_default)" >"$saved.new"
	mv -f "$saved.new" "$saved"
	own_machine "$dir"
	sysctl_set net.core.rmem_max 212992
	sysctl_set net.core.rmem_default 212992
	lab_up --dir "$dir" --hosts "$hosts" --relayd "$relayd" --relay-version 1.7.0 >"$dir/up.txt"

	write_specs "$dir"
	printf 'lab@relayctl namespaces="relayctl-plan" %s\n' "$(cut -d' ' -f1,2 "$dir/id_ed25519.pub")" >"$dir/allowed_signers"
	mkdir -p "$dir/bin"
	ln -sfn "$PWD/scripts/lab-relayctl.sh" "$dir/bin/relayctl"

	: >"$dir/ready"
	trap - EXIT INT TERM HUP
	kernel_unlock # the lab stays up without the lock
	echo "lab: $(hosts_text "$hosts") up (relayd 1.7.0; net.core.rmem_max and rmem_default at 212992, the values found are in $saved)"
	next_steps
}

case ${1:-} in
up) lab_start ;;
down) lab_stop ;;
*)
	echo "usage: [HOSTS=N] scripts/lab.sh up|down (make lab [HOSTS=N], make lab-down)" >&2
	exit 2
	;;
esac

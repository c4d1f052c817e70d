#!/usr/bin/env bash
# make lab, make lab-down: one lab host that stays up, to try relayctl by
# hand (docs/lab.md). The host is lab-1: a real OpenSSH sshd with its own
# /etc/sysctl.d, /opt/relay, /etc/relay and /var/lib/relayctl, running
# relayd 1.7.0 (which never asks for a buffer) through the generic service
# manager, in a network namespace of its own. LAB_DIR (default lab) gets
# what a client needs and ready specs:
#
#   bin/relayctl                          relayctl holding the machine-wide sysctl lock (below)
#   ssh_config, known_hosts, id_ed25519   how relayctl and ssh reach lab-1
#   lab.yaml                              the incident's fix for lab-1 (bin/relayd 1.8.0)
#   broken.yaml, relayd-broken            a release 1.9.0 that fails at start
#   allowed_signers                       the lab key, for approve and --require-approval
#   sysctls.saved                         the values down puts back
#   ready                                 written last: up finished
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
# LAB_RELAYD=PATH: the relayd lab-1 runs, installed as release 1.7.0
# (default: relayd 1.7.0, built from this tree). One that cannot start
# makes up fail once lab-1's sshd is up, as a test of the clean-up does.
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
lab=${LAB_DIR:-lab}
saved=$lab/sysctls.saved

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
	exit "$rc"
}

next_steps() {
	cat <<EOF
lab: next steps (docs/lab.md):
  cd $lab
  export PATH=\$PWD/bin:\$PATH RELAYCTL_SSH_CONFIG=\$PWD/ssh_config RELAYCTL_KNOWN_HOSTS=\$PWD/known_hosts
  relayctl plan lab.yaml --out lab.plan
lab: $lab/bin/relayctl holds the machine-wide sysctl lock while it runs: lab-1 shares this machine's kernel
lab: make lab-down stops it and puts the values back
EOF
}

lab_start() {
	need_root
	if [ -e "$lab/ready" ] && [ -e "$lab/lab.json" ] && ./bin/relaylab status --dir "$lab" >/dev/null 2>&1; then
		echo "lab: lab-1 is up already in $lab; make lab-down stops it"
		next_steps
		return 0
	fi
	if [ -e "$lab/lab.json" ] || [ -e "$saved" ]; then
		# An up killed half way (kill -9), or a lab stopped some other
		# way than down: what is left goes first, as down does it.
		echo "lab: the lab in $lab did not finish starting or has stopped since: stopping what is left of it first" >&2
		(lab_stop) # a subshell: its lock and its trap end with it
	fi
	mkdir -p "$lab"
	dir=$(cd "$lab" && pwd)
	relayd=${LAB_RELAYD:-$dir/relayd-1.7.0}
	[ -n "${LAB_RELAYD:-}" ] || build_release 1.7.0 "$relayd"
	printf '#!/bin/sh\necho "relayd 1.9.0: cannot start: a deliberate failure (the lab'"'"'s broken release)" >&2\nexit 1\n' >"$dir/relayd-broken"
	chmod 0755 "$dir/relayd-broken"

	trap lab_abort EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
	kernel_lock lab "make lab ($0 up)"
	# Saved before anything changes: from here on, whatever happens, the
	# abort above or the next down or up finds what to put back.
	printf 'net.core.rmem_max=%s\nnet.core.rmem_default=%s\n' \
		"$(sysctl_read net.core.rmem_max)" "$(sysctl_read net.core.rmem_default)" >"$saved.new"
	mv -f "$saved.new" "$saved"
	sysctl_set net.core.rmem_max 212992
	sysctl_set net.core.rmem_default 212992
	lab_up --dir "$dir" --hosts 1 --relayd "$relayd" --relay-version 1.7.0 >"$dir/up.txt"

	write_fix_spec "$dir/lab.yaml" lab-rcvbuf
	# The release's path, relative to the spec's folder (LAB_DIR may be anywhere).
	sed -i "s|artifact: \.\./bin/relayd|artifact: $(realpath --relative-to="$dir" bin/relayd)|" "$dir/lab.yaml"
	sed -e 's/^name: lab-rcvbuf$/name: lab-broken/' -e 's/version: 1\.8\.0/version: 1.9.0/' \
		-e 's|artifact: .*relayd$|artifact: relayd-broken|' \
		-e 's/^# The incident.s fix.*$/# A release that fails at start: the window rolls back to what ran before./' \
		"$dir/lab.yaml" >"$dir/broken.yaml"
	printf 'lab@relayctl namespaces="relayctl-plan" %s\n' "$(cut -d' ' -f1,2 "$dir/id_ed25519.pub")" >"$dir/allowed_signers"
	mkdir -p "$dir/bin"
	ln -sfn "$PWD/scripts/lab-relayctl.sh" "$dir/bin/relayctl"

	: >"$dir/ready"
	trap - EXIT INT TERM HUP
	kernel_unlock # the lab stays up without the lock
	echo "lab: lab-1 is up (relayd 1.7.0; net.core.rmem_max and rmem_default at 212992, the values found are in $saved)"
	next_steps
}

case ${1:-} in
up) lab_start ;;
down) lab_stop ;;
*)
	echo "usage: scripts/lab.sh up|down (make lab, make lab-down)" >&2
	exit 2
	;;
esac

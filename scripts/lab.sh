#!/usr/bin/env bash
# make lab, make lab-down: one lab host that stays up, to try relayctl by
# hand (README.md, "A ten-minute walkthrough"). The host is lab-1: a real OpenSSH sshd
# with its own /etc/sysctl.d, /opt/relay, /etc/relay and /var/lib/relayctl,
# running relayd 1.7.0 (which never asks for a buffer) through the generic
# service manager, in a network namespace of its own. LAB_DIR (default lab)
# gets what a client needs and ready specs:
#
#   ssh_config, known_hosts, id_ed25519   how relayctl and ssh reach lab-1
#   lab.yaml                              the incident's fix for lab-1 (bin/relayd 1.8.0)
#   broken.yaml, relayd-broken            a release 1.9.0 that fails at start
#   allowed_signers                       the lab key, for approve and --require-approval
#
# The kernel is this machine's: up puts net.core.rmem_max and rmem_default
# on the incident's 212,992 bytes, as make demo does, and down puts back the
# values it found, each under the lock the tests take. Between the two the
# lock is not held (a lab may stay up for hours): an apply to lab-1 changes
# the machine's rmem_max, so do not run one beside make test on a shared
# machine. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
lab=${LAB_DIR:-lab}

lab_start() {
	[ "$(id -u)" = 0 ] || { echo "lab: needs root (it starts sshd and changes net.core.rmem_max)" >&2; exit 1; }
	if [ -e "$lab/lab.json" ]; then
		echo "lab: $lab is up already (make lab-down stops it)" >&2
		exit 1
	fi
	mkdir -p "$lab"
	dir=$(cd "$lab" && pwd)
	build_release 1.7.0 "$dir/relayd-1.7.0"
	printf '#!/bin/sh\necho "relayd 1.9.0: cannot start: a deliberate failure (the lab'"'"'s broken release)" >&2\nexit 1\n' >"$dir/relayd-broken"
	chmod 0755 "$dir/relayd-broken"

	kernel_lock lab
	if [ ! -e "$dir/sysctls.saved" ]; then
		printf 'net.core.rmem_max=%s\nnet.core.rmem_default=%s\n' \
			"$(sysctl_read net.core.rmem_max)" "$(sysctl_read net.core.rmem_default)" >"$dir/sysctls.saved"
	fi
	sysctl_set net.core.rmem_max 212992
	sysctl_set net.core.rmem_default 212992
	lab_up --dir "$dir" --hosts 1 --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0 >"$dir/up.txt"
	kernel_unlock # the lab stays up without the lock

	write_fix_spec "$dir/lab.yaml" lab-rcvbuf
	sed -e 's/^name: lab-rcvbuf$/name: lab-broken/' -e 's/version: 1\.8\.0/version: 1.9.0/' \
		-e 's|artifact: \.\./bin/relayd|artifact: relayd-broken|' \
		-e 's/^# The incident.s fix.*$/# A release that fails at start: the window rolls back to what ran before./' \
		"$dir/lab.yaml" >"$dir/broken.yaml"
	printf 'lab@relayctl namespaces="relayctl-plan" %s\n' "$(cut -d' ' -f1,2 "$dir/id_ed25519.pub")" >"$dir/allowed_signers"

	cat <<EOF
lab: lab-1 is up (relayd 1.7.0; net.core.rmem_max and rmem_default at 212992, the values found are in $lab/sysctls.saved)
lab: next steps (README.md, "A ten-minute walkthrough"):
  cd $lab
  export PATH=\$PWD/../bin:\$PATH RELAYCTL_SSH_CONFIG=\$PWD/ssh_config RELAYCTL_KNOWN_HOSTS=\$PWD/known_hosts
  relayctl plan lab.yaml --out lab.plan
lab: make lab-down stops it and puts the values back
EOF
}

lab_stop() {
	if [ ! -e "$lab/lab.json" ]; then
		echo "lab: no lab is up in $lab" >&2
		exit 1
	fi
	./bin/relaylab down --dir "$lab" >/dev/null
	if [ -e "$lab/sysctls.saved" ]; then
		kernel_lock lab
		local k v
		while IFS='=' read -r k v; do
			sysctl_set "$k" "$v"
		done <"$lab/sysctls.saved"
		rm -f "$lab/sysctls.saved"
		echo "lab: stopped; restored net.core.rmem_max=$(sysctl_read net.core.rmem_max) net.core.rmem_default=$(sysctl_read net.core.rmem_default)"
	else
		echo "lab: stopped"
	fi
}

case ${1:-} in
up) lab_start ;;
down) lab_stop ;;
*)
	echo "usage: scripts/lab.sh up|down (make lab, make lab-down)" >&2
	exit 2
	;;
esac

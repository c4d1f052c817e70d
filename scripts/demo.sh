#!/usr/bin/env bash
# make demo: the incident's fix, end to end, on one local lab host.
#
# A lab host is a real OpenSSH sshd on 127.0.0.2:2222 with private
# /etc/sysctl.d, /opt/relay, /etc/relay and /var/lib/relayctl, running the
# reference relay relayd 1.7.0 (which does not ask for a buffer) in a
# network namespace of its own. The kernel is this machine's: rmem_max is
# global, so the demo sets net.core.rmem_max and rmem_default to the
# 212,992-byte defaults of the incident first, and puts back what it found
# when it ends. Needs root; installs openssh-server if it is missing.
#
# With --systemd (make demo-systemd) the host boots a real systemd and runs
# relayd as relay/dist/relayd.service (docs/systemd.md); the spec then says
# manager: systemd, name: relayd.
set -euo pipefail
cd "$(dirname "$0")/.."
manager="command"
[ "${1:-}" = --systemd ] && manager=systemd

if ! command -v sshd >/dev/null && [ ! -x /usr/sbin/sshd ]; then
	echo "demo: installing openssh-server"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
fi
. scripts/demo-lib.sh
demo_start demo "${DEMO_DIR:-demo}"

if [ "$manager" = systemd ]; then
	say "Start one lab host with a real systemd, relayd 1.7.0 as relayd.service"
	lab_up --dir "$dir/lab" --systemd 1 --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0
	pid_of='systemctl show -p MainPID --value relayd'
else
	say "Start one lab host with relayd 1.7.0"
	lab_up --dir "$dir/lab" --hosts 1 --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0
	pid_of='/opt/relay/bin/relay-service pid'
fi

socket() {
	# shellcheck disable=SC2016 # $1 is expanded by the host's shell
	./bin/relaylab exec --dir "$dir/lab" lab-1 -- sh -c \
		'nsenter -t "$($1)" -n ss -H -O -u -l -n -m "sport = :7788"' socket "$pid_of"
}
say "The relay socket, read from the kernel in the relay's network namespace"
socket

write_fix_spec "$dir/demo.yaml" demo-rcvbuf "$manager"
say "The spec ($dir/demo.yaml)"
cat "$dir/demo.yaml"

say "relayctl plan"
plan_changes "$dir/demo.yaml" "$dir/demo.plan"

say "The review ($dir/demo.plan.md)"
cat "$dir/demo.plan.md"

say "relayctl apply"
./bin/relayctl apply "$dir/demo.plan" "${ssh_flags[@]}"

say "The relay socket after the window"
socket

say "relayctl verify"
./bin/relayctl verify "$dir/demo.plan" "${ssh_flags[@]}"

say "The receipt ($dir/demo.plan.receipt.md)"
cat "$dir/demo.plan.receipt.md"

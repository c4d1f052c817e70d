#!/usr/bin/env bash
# relayctl as make lab's next steps run it (LAB_DIR/bin/relayctl links
# here): bin/relayctl, holding the machine-wide sysctl lock while it runs a
# command that reads or changes a host's kernel values. A lab host shares
# this machine's kernel, so an apply to it changes the machine's
# net.core.rmem_max, which tests and scripts change only under that lock:
# this waits for whoever holds it (saying who, and since when), and nobody
# else changes the values while relayctl runs or reads them. The lock's
# descriptor stays open across the exec, so relayctl itself holds it until
# it exits; then a watcher started here clears its line from the lock file
# (relayctl knows nothing of the lab: this is the lab's part).
#
# Commands that read no host's kernel run at once, without the lock:
# validate, show, approve, history, size, completion, man, help, --help
# and --version. plan, facts, verify, rollback (which read the hosts),
# apply, stage and bench (which change them, or load their relays), and
# any command this script does not know, take it.
set -euo pipefail
repo=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
. "$repo/scripts/demo-lib.sh"

# reads_kernel ARGS...: whether relayctl ARGS reads or changes a host's
# kernel, by its command (the first word that is not a flag).
reads_kernel() {
	local a
	for a in "$@"; do
		case $a in -h | --help | -help | --version | -v) return 1 ;; esac
	done
	for a in "$@"; do
		case $a in
		-*) ;;
		validate | show | approve | history | size | completion | man | help) return 1 ;;
		*) return 0 ;;
		esac
	done
	return 1 # no command: relayctl's usage
}

if ! reads_kernel "$@"; then
	exec "$repo/bin/relayctl" "$@"
fi
kernel_lock lab "relayctl $*"
if [ -n "${kernel_lock_fd:-}" ]; then
	# $$ is relayctl's pid once this script execs it.
	kernel_lock_clear_after "$$" </dev/null >/dev/null 2>&1 &
fi
exec "$repo/bin/relayctl" "$@"

#!/usr/bin/env bash
# chaos.sh: the long run of the chaos test (cmd/relayctl/lab_chaos_test.go,
# docs/recovery.md). Each trial plans the other release on three lab hosts
# (a third of the trials on two hosts with a real systemd), applies it,
# and at a random moment of its stage, window, read-back or commit kills
# relayctl, cuts a host's SSH session and everything under it, kills every
# relayctl process on a host or fills a disk; 2 s after a cut every relay
# must run, and the one recovery command (apply --resume) must leave every
# host as planned or as it was, with one relay process and a receipt and
# ledger that say so. Prints the figures by fault, phase and recovery, and
# writes them as JSON.
#
# Needs root (the lab). Takes the machine's global sysctl lock for the
# whole run, as the Go lab tests do.
#
# Settings (environment):
#   TRIALS=250    trials (CI runs 4 in make test)
#   SEED=2026     the random seed (the same seed, the same faults)
#   FAULTS=LIST   the faults drawn from, comma-separated (default all: kill
#                 relayctl,cut a connection,kill an agent,fill a disk)
#   MANAGERS=M    the hosts' service managers: command, systemd, or
#                 command,systemd (the default: a third of the trials on
#                 systemd hosts)
#   VERBOSE=1     every trial's line and the test's own log, not only
#                 the figures
#   OUT=FILE      the figures as JSON (default: chaos-SEED.json here)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${TRIALS:-250}
seed=${SEED:-2026}
out=${OUT:-$PWD/chaos-$seed.json}
filter='chaos:|^(--- |ok|FAIL)'
if [ -n "${VERBOSE:-}" ]; then filter=.; fi
RELAYCTL_CHAOS_TRIALS=$trials RELAYCTL_CHAOS_SEED=$seed RELAYCTL_CHAOS_OUT=$out RELAYCTL_CHAOS_FAULTS=${FAULTS:-} \
	RELAYCTL_CHAOS_MANAGERS=${MANAGERS:-} \
	go test -count=1 -run '^TestLabChaos$' -v -timeout 3h ./cmd/relayctl | grep -E "$filter"
echo "figures: $out"

#!/usr/bin/env bash
# relayctl as make lab's next steps run it (LAB_DIR/bin/relayctl links
# here): bin/relayctl, holding the machine-wide sysctl lock while it runs.
# A lab host shares this machine's kernel, so an apply to it changes the
# machine's net.core.rmem_max, which tests and scripts change only under
# that lock: this waits for whoever holds it (saying who, and since when),
# and nobody else changes the values while relayctl runs. The lock's
# descriptor stays open across the exec, so relayctl itself holds it until
# it exits. relayctl knows nothing of the lab; this is the lab's part.
set -euo pipefail
repo=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
. "$repo/scripts/demo-lib.sh"
kernel_lock lab "relayctl $*"
exec "$repo/bin/relayctl" "$@"

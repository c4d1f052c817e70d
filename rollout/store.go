package rollout

import (
	"strconv"

	"github.com/relayctl/relayctl/plans"
)

// Releases on a host are kept by content as well as by version: every
// release relayctl places arrives first as RELEASES_DIR/.sha256/<sha256>/relayd
// (uploaded with keep, or fetched by the host itself), and the version
// folder RELEASES_DIR/<version> is a copy made from it on the host, its
// sha256 checked again. Bytes already in the store, checked on the host by
// their sha256, are never uploaded or fetched again: not by a second
// staging, not by the apply after it, not for the same bytes under
// another version. The store's folder starts with a dot, so the releases
// observe lists (and a plan's fingerprint) do not change when it does.
// A tarball is kept as release.tar, a binary as relayd (whatever its
// program's name: the store's layout predates other names).
func storeFile(p *plans.Plan, sha string) string {
	name := "relayd"
	if p.Relay.Kind == plans.ReleaseKindTarball || p.Relay.Kind == plans.ReleaseKindFolder {
		name = "release.tar"
	}
	return storeDir(p) + "/" + sha + "/" + name
}

// storeDir is the folder of the host's release store.
func storeDir(p *plans.Plan) string { return p.Paths.Releases + "/.sha256" }

// keepOp has the host hold data at path, sent only if it does not
// already (see the agent's keep).
func keepOp(path, sha string, data []byte, mode string) Op {
	o := op("keep", path, sha, strconv.Itoa(len(data)), mode)
	o.Data, o.Offer = data, true
	return o
}

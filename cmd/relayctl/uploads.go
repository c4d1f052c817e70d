package main

import (
	"fmt"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/uplink"
)

// releaseCache opens relayctl's cache of the releases it ships (package
// wire: a release upgrade is sent as a patch from the release the host
// keeps, which only that release's own bytes can make), and keeps data
// in it. A cache that cannot be used (a folder another user owns or can
// write) costs the patches, nothing else: it is said once, and nil is
// returned.
func releaseCache(e *env, data []byte) *uplink.Cache {
	dir, err := uplink.DefaultCacheDir()
	var c *uplink.Cache
	if err == nil {
		c, err = uplink.OpenCache(dir)
	}
	if err == nil {
		err = c.PutRelease(data)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "relayctl: warning: %s; releases go compressed, not as patches from the one a host keeps\n", plans.Visible(err.Error()))
		if c == nil {
			return nil
		}
	}
	return c
}

// planUploads is what plan sizes each host's upload with: the release's
// forms (nil for a release the hosts fetch, or none).
func planUploads(e *env, sc *specFindings) plans.Uploads {
	if sc.release == nil {
		return nil
	}
	return uplink.NewRelease(sc.release, releaseCache(e, sc.release))
}

// shippedCache is the release cache for an apply or stage that uploads
// artifact (nil for one that uploads nothing).
func shippedCache(e *env, artifact []byte) *uplink.Cache {
	if artifact == nil {
		return nil
	}
	return releaseCache(e, artifact)
}

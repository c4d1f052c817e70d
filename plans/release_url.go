package plans

import (
	"fmt"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxURL bounds a release URL.
const MaxURL = 2048

// ValidReleaseURL checks where hosts fetch a release from. It reaches each
// host as one data field of the agent and then one argument of curl or
// wget, never a shell line, but it is shown in the review and in the
// host's process list: so http or https only, a host, no credentials, no
// glob characters, and printable ASCII without spaces, quotes or
// backslashes.
func ValidReleaseURL(s string) error {
	if len(s) > MaxURL {
		return fmt.Errorf("a url of %d bytes; at most %d", len(s), MaxURL)
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune("\"'`\\<>", r) {
			return fmt.Errorf("want a url of printable ASCII without spaces, quotes or backslashes (percent-encode them), got %q", s)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("want an http:// or https:// url, got %q", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("want a url with a host, got %q", s)
	}
	// curl expands {a,b} and [1-50000] in a url into many requests (one
	// url made 124 requests in 4 s): the agent turns that off (-g), and a
	// spec may not hold them at all. Brackets are for an IPv6 host only.
	if strings.ContainsAny(s, "{}") || strings.ContainsAny(strings.Replace(s, u.Host, "", 1), "[]") {
		return fmt.Errorf("a url with { } or [ ] outside an IPv6 host would be a glob of many urls to curl; percent-encode them (%%7B %%7D %%5B %%5D), got %q", s)
	}
	if u.User != nil {
		return fmt.Errorf("a url with credentials would show in the review and in each host's process list; serve the release without them, got %q", s)
	}
	return nil
}

func (p *specParser) releaseURL(n *yaml.Node) string {
	s, ok := p.str(n, "relay.release.url")
	if !ok {
		return ""
	}
	if err := ValidReleaseURL(s); err != nil {
		p.fail(n, "relay.release.url", "%v", err)
		return ""
	}
	return s
}

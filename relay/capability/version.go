package capability

import (
	"bytes"
	"fmt"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// VersionPrefix starts relayd's version marker. A release build stamps the
// marker with the version, beside main.Version:
//
//	go build -ldflags "-X main.Version=1.8.0 -X main.versionMarker=relayd-version:1.8.0"
//
// (VersionFlags writes both). The linker ends a stamped string with a NUL
// byte, which is how Version tells the stamp from the prefix constant
// itself, or any other string that happens to start the same way.
const VersionPrefix = "relayd-version:"

// VersionFlags are the -X flags that stamp relayd's version and its
// marker, for go build's -ldflags.
func VersionFlags(version string) string {
	return "-X main.Version=" + version + " -X main.versionMarker=" + VersionPrefix + version
}

var versionToken = lazyre.New(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$`)

// Version returns the version an artifact's marker says, "" when it has
// none (an older relayd, one built without the marker, another program).
// Two markers that disagree are an error: the artifact is not one build.
func Version(artifact []byte) (string, error) {
	var found string
	pre := []byte(VersionPrefix)
	for rest := artifact; ; {
		i := bytes.Index(rest, pre)
		if i < 0 {
			break
		}
		rest = rest[i+len(pre):]
		end := bytes.IndexByte(rest[:min(len(rest), 65)], 0)
		if end < 0 || !versionToken.Match(rest[:end]) {
			continue
		}
		v := string(rest[:end])
		if found != "" && found != v {
			return "", fmt.Errorf("read version: two markers disagree: %q and %q", found, v)
		}
		found = v
	}
	return found, nil
}

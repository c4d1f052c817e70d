package artifact

import "archive/tar"

// MemberName checks one tarball member as Tarball does and returns its
// name inside the release ("." for the release's own folder): the host
// agent unpacks a release by the same rules relayctl read it by, so a
// tarball that reached a host some other way is held to them too.
func MemberName(h *tar.Header) (string, error) { return memberName(h) }

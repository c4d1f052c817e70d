package main

import (
	"runtime/debug"
	"testing"
)

// Without a stamp, the commit is go build's VCS stamp, dirty when the
// tree had changes, and nothing at all when there is no stamp.
func TestCommitFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, ""},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "4eca611"}, {Key: "vcs.modified", Value: "false"}}, "4eca611"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "4eca611"}}, "4eca611-dirty"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	} {
		if got := vcsCommit(tc.settings); got != tc.want {
			t.Errorf("vcsCommit(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "abc123"
	if got := versionText(); got != version()+" (commit abc123)" {
		t.Errorf("versionText() = %q with a stamped commit", got)
	}
}

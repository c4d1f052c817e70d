package rollout

import "github.com/relayctl/relayctl/plans"

// stageFile writes a file's planned content beside it (PATH.relayctl-new),
// not yet in place: the window then only renames it. A file staged ahead
// with the same content (relayctl stage) is not sent again.
type stageFile struct {
	noStep
	fc   plans.FileChange
	send bool // the host lacks the release: it was not staged ahead, so neither was this
}

func (s stageFile) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindStageFile, Key: s.fc.Path,
		Title: titlef("stage %s: beside %s (not yet in place)", s.fc.Role, s.fc.Path)}
}

func (s stageFile) do() []Op {
	// The staged file takes the mode and owner of the file it will
	// replace (a 0600 config holding a secret stays 0600); 0644 when new.
	o := keepOp(s.fc.Path+".relayctl-new", s.fc.SHA256, []byte(s.fc.Content), "0644")
	o.Args = append(o.Args, s.fc.Path)
	// A host being sent the release was not staged ahead: its bytes go at
	// once rather than cost the round trip of an offer (observe cannot see
	// a file staged beside its place, so a host that has the release is
	// offered them, and one staged ahead answers kept).
	o.Send = s.send
	return []Op{o}
}

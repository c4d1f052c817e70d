package rollout

import "github.com/relayctl/relayctl/plans"

// stageFile writes a file's planned content beside it (PATH.relayctl-new),
// not yet in place: the window then only renames it. A file staged ahead
// with the same content (relayctl stage) is not sent again.
type stageFile struct {
	noStep
	fc plans.FileChange
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
	return []Op{o}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/relayctl/relayctl/artifact"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
)

// readRelease reads a release of kind from path: one program file, a
// tarball, or a folder packed into one (package artifact).
func readRelease(kind, path, program string) (artifact.Release, error) {
	if kind == plans.ReleaseKindFolder {
		st, err := os.Lstat(path)
		if err != nil {
			return artifact.Release{}, err
		}
		if !st.IsDir() {
			return artifact.Release{}, fmt.Errorf("%s is not a folder (relay.release.kind is folder)", path)
		}
		return artifact.Folder(path, program)
	}
	data, err := readRegular(path, plans.MaxArtifactSize)
	if err != nil {
		return artifact.Release{}, err
	}
	if kind == plans.ReleaseKindTarball {
		return artifact.Tarball(data, program)
	}
	return artifact.Binary(data), nil
}

// specRelative is a path as a spec names it, resolved from the spec's
// folder.
func specRelative(specFile, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(specFile), p)
}

// readArtifact finds the release relative to the spec and reads it: what
// a plan records of it, and its bytes (nil for a release the hosts fetch).
// A binary that hosts fetch from a url needs no local file: its sha256 is
// the spec's (an artifact given as well must match it), and its version
// cannot be checked. A release of kind none has no artifact. The warnings
// say what could not be checked.
func readArtifact(s *plans.Spec) (plans.Artifact, []byte, []*plans.SpecError, error) {
	art, data, warns, err := readArtifactFile(s)
	if s.Relay.Release.URL != "" {
		data = nil // each host fetches it: nothing crosses relayctl's uplink
	}
	return art, data, warns, err
}

func readArtifactFile(s *plans.Spec) (plans.Artifact, []byte, []*plans.SpecError, error) {
	rel := s.Relay.Release
	if !rel.Ships() {
		return plans.Artifact{}, nil, nil, nil
	}
	if rel.URL != "" && rel.Artifact == "" {
		warn := &plans.SpecError{File: s.File, Field: "relay.release.url", Msg: fmt.Sprintf("the version of the release the hosts fetch from %s cannot be checked, since relayctl reads no copy of it; a release that is not %s shows only at the read-back, after the restart: give the same file as relay.release.artifact to have it checked", rel.URL, rel.Version)}
		return plans.Artifact{SHA256: rel.SHA256, VersionFrom: capability.FromNone}, nil, []*plans.SpecError{warn}, nil
	}
	fail := func(msg string) error {
		return &plans.SpecError{File: s.File, Line: rel.Line, Field: "relay.release.artifact", Msg: msg}
	}
	p := specRelative(s.File, rel.Artifact)
	r, err := readRelease(rel.Kind, p, rel.Program)
	if err != nil {
		msg := err.Error()
		if errors.Is(err, os.ErrNotExist) {
			msg = fmt.Sprintf("cannot read %s (%v); the path is relative to the spec's folder (build it with make build)", p, errors.Unwrap(err))
		}
		return plans.Artifact{}, nil, nil, fail(msg)
	}
	// What the release can do (a handoff) is read from its program's bytes,
	// never by running it.
	caps, err := capability.Capabilities(r.Program)
	if err != nil {
		return plans.Artifact{}, nil, nil, fail(err.Error())
	}
	// So is the version it was built as, where the build recorded it.
	program := p
	if rel.Kind != plans.ReleaseKindBinary {
		program = p + "'s " + rel.Program
	}
	from, warn, err := checkArtifactVersion(s, program, r.Program)
	if err != nil {
		return plans.Artifact{}, nil, nil, err
	}
	var warns []*plans.SpecError
	if warn != nil {
		warns = append(warns, warn)
	}
	return plans.Artifact{SHA256: r.SHA256, Size: int64(len(r.Data)), Capabilities: caps, TreeSHA256: r.TreeSHA256, VersionFrom: from}, r.Data, warns, nil
}

// readTemplates reads the spec's templates, relative to its folder.
func readTemplates(s *plans.Spec) (map[string]string, plans.SpecErrors) {
	texts := map[string]string{}
	var errs plans.SpecErrors
	for i, t := range s.Relay.Config.Templates {
		if t.Source == "" {
			continue
		}
		p := specRelative(s.File, t.Source)
		data, err := readRegular(p, plans.MaxTemplateSize)
		if err != nil {
			errs = append(errs, &plans.SpecError{File: s.File, Line: t.Line, Field: fmt.Sprintf("relay.config.templates[%d].source", i),
				Msg: fmt.Sprintf("cannot read the template %s: %v (the path is relative to the spec's folder)", p, err)})
			continue
		}
		texts[t.Source] = string(data)
	}
	return texts, errs
}

// planArtifact reads the release and checks it is the one reviewed. A
// release with a url is fetched by each host itself, and one of kind none
// ships nothing: nothing to read.
func planArtifact(override string, p *plans.Plan) ([]byte, error) {
	if p.Rollback != nil {
		// A rollback goes back to the release each host keeps: no file
		// is shipped, and the host checks it by its receipt's sha256.
		if override != "" {
			return nil, fmt.Errorf("--artifact: %s is a rollback plan: each host goes back to the release it keeps, and no file is uploaded", p.Name)
		}
		return nil, nil
	}
	if p.Relay.URL != "" || p.Relay.Kind == plans.ReleaseKindNone {
		switch {
		case override == "":
			return nil, nil
		case p.Relay.URL != "":
			return nil, fmt.Errorf("--artifact: plan %s's release is fetched by each host from %s; there is no file to upload", p.Name, p.Relay.URL)
		}
		return nil, fmt.Errorf("--artifact: plan %s ships no release (relay.release.kind is none); there is no file to upload", p.Name)
	}
	path := override
	if path == "" {
		path = specRelative(p.SpecFile, p.Relay.Artifact)
	}
	r, err := readRelease(p.Relay.Kind, path, p.Relay.Program)
	if err != nil {
		return nil, withHint(fmt.Errorf("read release artifact: %w", err), "give its path with --artifact FILE")
	}
	if r.SHA256 != p.Relay.SHA256 {
		return nil, fmt.Errorf("release artifact %s has sha256 %s, the plan was reviewed with %s: it changed since; make a new plan", path, r.SHA256, p.Relay.SHA256)
	}
	return r.Data, nil
}

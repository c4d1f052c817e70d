package rollout

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// The host-side step lists: apply.sh reads them with `read -r`, one step a
// line, fields separated by tabs. They are data, never shell code; this
// file is the only place that writes them, after validating every field.

// hostScript is what apply stages on one host.
type hostScript struct {
	manifest []string // stage steps
	window   []string // the window, in order
	rollback []string // undoes the window, then restarts once
	files    map[string][]byte
}

var (
	versionRe  = regexp.MustCompile(`^[0-9A-Za-z.+-]{1,64}$`)
	unitNameRe = regexp.MustCompile(`^[A-Za-z0-9@._:-]{1,128}$`)
)

// field checks a value before it goes into a step line.
func field(s string) error {
	if strings.ContainsAny(s, "\t\n\r\x00") {
		return fmt.Errorf("value %q contains a tab, newline or NUL", s)
	}
	return nil
}

func line(fields ...string) (string, error) {
	for _, f := range fields {
		if err := field(f); err != nil {
			return "", err
		}
	}
	return strings.Join(fields, "\t"), nil
}

// ValidatePlan re-checks everything in a plan file that will reach a host.
// A plan is untrusted input like a spec: it may have been edited (and its
// checksum recomputed) by hand.
func ValidatePlan(p *plans.Plan) error {
	for _, s := range p.Sysctl {
		if err := tune.ValidKey(s.Key); err != nil {
			return fmt.Errorf("plan sysctl: %w", err)
		}
		if err := tune.ValidateValue(s.Key, s.Value); err != nil {
			return fmt.Errorf("plan sysctl: %w", err)
		}
	}
	for name, v := range map[string]string{"sysctl_file": p.Paths.SysctlFile, "releases_dir": p.Paths.Releases,
		"current_link": p.Paths.Current, "relay_config": p.Paths.RelayConfig, "state_dir": p.Paths.StateDir} {
		if err := plans.ValidHostPath(v); err != nil {
			return fmt.Errorf("plan paths.%s: %w", name, err)
		}
	}
	if !versionRe.MatchString(p.Relay.Version) {
		return fmt.Errorf("plan relay.version %q is not a version", p.Relay.Version)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.Relay.SHA256) {
		return fmt.Errorf("plan relay.sha256 %q is not a sha256", p.Relay.SHA256)
	}
	sv := p.Relay.Service
	switch sv.Manager {
	case "systemd":
		if !unitNameRe.MatchString(sv.Name) {
			return fmt.Errorf("plan relay.service.name %q is not a unit name", sv.Name)
		}
	case "command":
		for _, argv := range [][]string{sv.Start, sv.Stop, sv.PID} {
			if len(argv) == 0 || !path.IsAbs(argv[0]) {
				return fmt.Errorf("plan relay.service: a command must start with an absolute path, got %q", argv)
			}
			for _, w := range argv {
				if err := field(w); err != nil {
					return fmt.Errorf("plan relay.service: %w", err)
				}
			}
		}
	default:
		return fmt.Errorf("plan relay.service.manager %q: want systemd or command", sv.Manager)
	}
	for _, h := range p.Hosts {
		for _, st := range h.Steps {
			if st.Kind == plans.StepSetSysctl {
				if err := tune.ValidKey(st.Key); err != nil {
					return fmt.Errorf("plan host %s: %w", h.Host, err)
				}
				if err := tune.ValidateValue(st.Key, st.Value); err != nil {
					return fmt.Errorf("plan host %s: %w", h.Host, err)
				}
			}
		}
		for _, s := range h.Previous.Sysctls {
			if err := field(s.Value); err != nil {
				return fmt.Errorf("plan host %s: previous %s: %w", h.Host, s.Key, err)
			}
		}
	}
	return nil
}

// Staged file names, shared with apply.sh.
const (
	stagedRelayd   = "relayd"
	stagedConfig   = "config"
	stagedDropIn   = "dropin"
	backupConfig   = "backup-config"
	backupDropIn   = "backup-dropin"
	backupCurrent  = "backup-current"
	listWindow     = "window"
	listRollback   = "rollback"
	stagedManifest = "manifest"
)

// buildScript turns a host's plan into the files apply stages. artifact is
// the release file's content (its sha256 was checked against the plan).
func buildScript(p *plans.Plan, h *plans.HostPlan, artifact []byte) (*hostScript, error) {
	s := &hostScript{files: map[string][]byte{}}
	add := func(list *[]string, fields ...string) error {
		l, err := line(fields...)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Host, err)
		}
		*list = append(*list, l)
		return nil
	}
	paths := p.Paths
	relDir := path.Join(paths.Releases, p.Relay.Version)
	var errs []error
	do := func(err error) { errs = append(errs, err) }

	do(add(&s.manifest, "begin", p.Name, p.Checksum))
	do(add(&s.manifest, "backup-file", paths.RelayConfig, backupConfig))
	do(add(&s.manifest, "backup-file", paths.SysctlFile, backupDropIn))
	do(add(&s.manifest, "backup-link", paths.Current, backupCurrent))
	for _, st := range h.Steps {
		switch st.Kind {
		case plans.StepUploadRelease:
			do(add(&s.manifest, "upload-release", relDir, p.Relay.SHA256, stagedRelayd))
			s.files[stagedRelayd] = artifact
		case plans.StepCheckRelease:
			do(add(&s.manifest, "check-release", relDir, p.Relay.SHA256))
		case plans.StepStageConfig:
			do(add(&s.manifest, "stage-file", paths.RelayConfig, stagedConfig))
			s.files[stagedConfig] = []byte(h.Config.Planned)
		case plans.StepStageDropIn:
			if h.DropIn.Planned != "" {
				do(add(&s.manifest, "stage-file", paths.SysctlFile, stagedDropIn))
				s.files[stagedDropIn] = []byte(h.DropIn.Planned)
			}
		case plans.StepSetSysctl:
			do(add(&s.window, "set-sysctl", st.Key, st.Value))
		case plans.StepPersistDropIn:
			if h.DropIn.Planned == "" {
				do(add(&s.window, "remove-file", paths.SysctlFile))
			} else {
				do(add(&s.window, "move-file", paths.SysctlFile+".relayctl-new", paths.SysctlFile))
			}
		case plans.StepSwitchRelease:
			do(add(&s.window, "set-link", paths.Current, relDir))
		case plans.StepInstallConfig:
			do(add(&s.window, "move-file", paths.RelayConfig+".relayctl-new", paths.RelayConfig))
		case plans.StepRestart:
			do(add(&s.window, "restart", p.Relay.Service.Manager, p.Relay.Service.Name))
		}
	}

	// Rollback restores what the window may have touched, in reverse order
	// of dependence, then restarts (or stops) the relay once.
	for _, st := range h.Steps {
		if st.Kind != plans.StepSetSysctl {
			continue
		}
		for _, prev := range h.Previous.Sysctls {
			if prev.Key == st.Key {
				do(add(&s.rollback, "set-sysctl", prev.Key, prev.Value))
			}
		}
	}
	do(add(&s.rollback, "restore-file", paths.SysctlFile, backupDropIn))
	do(add(&s.rollback, "restore-link", paths.Current, backupCurrent))
	do(add(&s.rollback, "restore-file", paths.RelayConfig, backupConfig))
	if h.Previous.RelayRunning {
		do(add(&s.rollback, "restart", p.Relay.Service.Manager, p.Relay.Service.Name))
	} else {
		do(add(&s.rollback, "stop", p.Relay.Service.Manager, p.Relay.Service.Name))
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	s.files[stagedManifest] = []byte(strings.Join(s.manifest, "\n") + "\n")
	s.files[listWindow] = []byte(strings.Join(s.window, "\n") + "\n")
	s.files[listRollback] = []byte(strings.Join(s.rollback, "\n") + "\n")
	s.files["stop.argv"] = []byte(strings.Join(p.Relay.Service.Stop, "\n") + "\n")
	s.files["start.argv"] = []byte(strings.Join(p.Relay.Service.Start, "\n") + "\n")
	return s, nil
}

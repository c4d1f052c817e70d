package plans

// Every file relayctl writes on a host is an entry of HostPlan.Files: the
// relay config, the sysctl drop-in, the systemd unit drop-in. The
// fingerprint, validate, the review, the engine's steps (stage it beside
// its path, put it in place in the window, undo from a backup) and the
// receipt iterate over that one list; a new kind of file is a role here
// and a planner that adds its entry.

// File roles: what a planned file is for.
const (
	RoleRelayConfig  = "relay config"
	RoleSysctlDropIn = "sysctl drop-in"
	RoleUnitDropIn   = "unit drop-in"
)

// FileRole is what relayctl knows about one role of file.
type FileRole struct {
	Name string
	// Label is how the review names such a file.
	Label string
	// Why it is there, for the review ("" for nothing to add).
	Why string
	// Restarts: a change takes effect when the relay restarts (so the
	// plan restarts it); a sysctl drop-in takes effect at boot.
	Restarts bool
	// Reload: systemd must read it again (systemctl daemon-reload) once
	// it changes, before the restart.
	Reload bool
	// Always: the review lists it even when it is absent and stays so.
	Always bool
}

// FileRoles lists the roles, in the order the review shows their files.
var FileRoles = []FileRole{
	{Name: RoleRelayConfig, Label: "Relay config", Restarts: true, Always: true},
	{Name: RoleSysctlDropIn, Label: "Sysctl drop-in", Always: true},
	{Name: RoleUnitDropIn, Label: "systemd unit drop-in", Why: "CAP_NET_ADMIN for SO_RCVBUFFORCE", Restarts: true, Reload: true},
	{Name: RoleConfigDropIn, Label: "Config drop-in", Why: "from a template", Restarts: true},
	{Name: RoleServiceDropIn, Label: "systemd unit drop-in", Why: "from a template", Restarts: true, Reload: true},
}

// Role finds a role by name.
func Role(name string) (FileRole, bool) {
	for _, r := range FileRoles {
		if r.Name == name {
			return r, true
		}
	}
	return FileRole{}, false
}

// FileChange is a file relayctl owns on the host. Its planned content is
// never stored in the plan (a relay config may hold secrets): apply
// derives it again and checks it against SHA256, and the review shows Diff,
// with secrets masked.
type FileChange struct {
	Role          string `json:"role"` // RoleRelayConfig, ...
	Path          string `json:"path"`
	Change        bool   `json:"change"`
	Exists        bool   `json:"exists"`
	Remove        bool   `json:"remove,omitempty"`         // the plan removes the file
	SHA256        string `json:"sha256,omitempty"`         // of the planned content
	CurrentSHA256 string `json:"current_sha256,omitempty"` // of the content found
	// Masked: the plan was made from masked facts (relayctl facts --json),
	// so SHA256 and CurrentSHA256 hash the masked content (MaskConfig).
	Masked  bool        `json:"masked,omitempty"`
	Diff    []DiffLine  `json:"diff,omitempty"`    // current → planned, secrets masked
	Changes []KeyChange `json:"changes,omitempty"` // the same per key, secrets masked
	// Restore names the host's backup the planned content is copied from
	// (a rollback: Undo's receipt's backups), checked against SHA256 on
	// the host: the content never leaves it.
	Restore string `json:"restore,omitempty"`
	Content string `json:"-"` // the planned content, derived, never stored
}

// fileChange compares a file found on the host with its planned content;
// remove means the plan wants no file at all.
func fileChange(role, p string, cur FileFact, planned string, remove bool) FileChange {
	fc := FileChange{Role: role, Path: p, Exists: cur.Exists, Remove: remove, Content: planned}
	if cur.Exists {
		fc.CurrentSHA256 = sha256Text(cur.Content)
	}
	if remove {
		fc.Change = cur.Exists
	} else {
		fc.SHA256 = sha256Text(planned)
		fc.Change = !cur.Exists || cur.Content != planned
	}
	if fc.Change {
		fc.Diff = diffLines(cur.Content, planned)
	}
	return fc
}

// Reviewed is the sha256 a planned file was reviewed by, for comparing
// with one derived now from the host (which is never masked): the masked
// content's when the plan was made from masked facts.
func (fc FileChange) Reviewed(derived FileChange) (reviewed, now string) {
	if fc.Masked {
		return fc.SHA256, fc.maskedSHA256(derived.Content)
	}
	return fc.SHA256, derived.SHA256
}

// maskedSHA256 hashes content masked as facts --json masks a file of the
// role: a relay config line by line as KEY=VALUE, any other file by the
// lines that name a secret.
func (fc FileChange) maskedSHA256(content string) string {
	if fc.Role == RoleRelayConfig {
		return MaskedSHA256(content)
	}
	return sha256Text(MaskGeneric(content))
}

// Holds reports whether content read from the host is the file's planned
// content (or, with current, the content it had).
func (fc FileChange) Holds(content string, current bool) bool {
	want, got := fc.SHA256, sha256Text(content)
	if current {
		want = fc.CurrentSHA256
	}
	if fc.Masked {
		got = fc.maskedSHA256(content)
	}
	return want == got
}

// FileAt is the host plan's file at path, or nil.
func (h *HostPlan) FileAt(path string) *FileChange {
	for i := range h.Files {
		if h.Files[i].Path == path {
			return &h.Files[i]
		}
	}
	return nil
}

// File is the host plan's file of a role, or nil (the first, for a role
// templates may have several of).
func (h *HostPlan) File(role string) *FileChange {
	for i := range h.Files {
		if h.Files[i].Role == role {
			return &h.Files[i]
		}
	}
	return nil
}

// filesRestart reports whether a file changes that takes effect only when
// the relay restarts.
func (h *HostPlan) filesRestart() bool {
	for _, fc := range h.Files {
		if r, _ := Role(fc.Role); r.Restarts && fc.Change {
			return true
		}
	}
	return false
}

// Observed is the planned file as facts show it.
func (fc FileChange) Observed(f *Facts) FileFact {
	switch fc.Role {
	case RoleRelayConfig:
		return f.Config
	case RoleUnitDropIn:
		if f.UnitDropIn != nil {
			return *f.UnitDropIn
		}
		return FileFact{}
	case RoleConfigDropIn, RoleServiceDropIn:
		return f.File(fc.Path)
	}
	return fileFact(f, fc.Path)
}

// PlannedFile is a file a plan may write on a host: its role and path.
type PlannedFile struct{ Role, Path string }

// PlannedFiles are every file a plan may write on a host, from its spec:
// the relay config (with the env file), the sysctl drop-in, relayd's force
// drop-in (a systemd service told SO_RCVBUFFORCE through its env file),
// and what each template renders.
func PlannedFiles(p *Plan) []PlannedFile {
	var out []PlannedFile
	if p.Relay.Config.EnvFile {
		out = append(out, PlannedFile{RoleRelayConfig, p.Paths.RelayConfig})
	}
	out = append(out, PlannedFile{RoleSysctlDropIn, p.Paths.SysctlFile})
	if p.Relay.Service.Manager == "systemd" && p.Relay.Config.EnvFile && p.Relay.Config.Keys.SORcvbufForce != "" {
		out = append(out, PlannedFile{RoleUnitDropIn, UnitDropInPath(p.Relay.Service.Name)})
	}
	for _, t := range p.Relay.Config.Templates {
		role := RoleConfigDropIn
		if t.UnitDropIn {
			role = RoleServiceDropIn
		}
		out = append(out, PlannedFile{role, t.Path})
	}
	return out
}

package plans

// Facts is what relayctl observed on one host: everything the plan depends
// on, and the counters a review wants to see. rollout fills it over SSH;
// `relayctl facts --json` prints it and `plan --facts` reads it back, so the
// JSON names are part of the contract.
type Facts struct {
	Host     string `json:"host"`    // as named in the spec
	Address  string `json:"address"` // what was dialled, host:port
	User     string `json:"user"`
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	// Arch is the host's machine as uname reports it (x86_64, aarch64):
	// which build of the host agent it runs. "" where observe did not say.
	Arch string `json:"arch,omitempty"`
	// InitialNetns is false when the SSH session runs in a child network
	// namespace (a container): global sysctls are read-only there.
	InitialNetns bool `json:"initial_netns"`

	Sysctls     map[string]SysctlFact `json:"sysctls"`
	SysctlFiles []ConfFile            `json:"sysctl_files"`
	// SkippedFiles are sysctl.d entries observe did not read: a name with
	// characters relayctl does not pass through, or a file over the size
	// limit. A review says so, since boot precedence may then be wrong.
	SkippedFiles []string `json:"skipped_files,omitempty"`

	Release RelayRelease `json:"release"`
	Config  FileFact     `json:"relay_config"`
	// UnitDropIn is relayctl's drop-in of the relay's systemd unit
	// (UnitDropInPath), for a systemd-managed relay.
	UnitDropIn *FileFact `json:"unit_drop_in,omitempty"`
	// Files are the other files a plan writes, by path: what its
	// templates render (relay.config.templates).
	Files   map[string]FileFact `json:"files,omitempty"`
	Service ServiceFact         `json:"service"`
	Socket  SocketFact          `json:"socket"`
	// RelayStatus is the relay's own /status, when it has a control plane.
	RelayStatus *RelayStatusFact `json:"relay_status,omitempty"`
	// ClockNanos is the host's clock when observed (Unix ns): receipts time
	// the window on the host's clock, not across the network.
	ClockNanos int64 `json:"clock_ns"`
	// LastApply is the host's newest receipt with a read-back, when the
	// query asked for it (verify: the baseline of the drop rate since).
	LastApply *LastApply `json:"last_apply,omitempty"`
	// Undo is the host's newest receipt of a plan with a record of what
	// its window changed, when the query asked for it (a rollback of that
	// plan), and the backups kept beside it.
	Undo *UndoFact `json:"undo,omitempty"`
	// Journal and LockOwner are left by an apply that did not finish.
	Journal   string `json:"journal,omitempty"`
	LockOwner string `json:"lock_owner,omitempty"`
}

// RelayStatusFact is what the relay reports about itself.
type RelayStatusFact struct {
	Read              bool   `json:"read"`
	Error             string `json:"error,omitempty"`
	Version           string `json:"version,omitempty"`
	PID               int    `json:"pid,omitempty"`
	SORcvbufRequested int    `json:"so_rcvbuf_requested,omitempty"`
	SORcvbufEffective int    `json:"so_rcvbuf_effective,omitempty"`
	RxDrops           uint64 `json:"rx_drops,omitempty"`
	RxPackets         uint64 `json:"rx_packets,omitempty"` // datagrams the relay read (counters.rx_packets)
	SocketInode       uint64 `json:"socket_inode,omitempty"`
	Lobbies           int    `json:"lobbies,omitempty"`
	Players           int    `json:"players,omitempty"`
	// PlayersEstablished is the players that have played 5 s (relayd's
	// players_established), nil from a relay that does not report it;
	// Forwarded the data datagrams it forwarded for its players
	// (counters.forwarded).
	PlayersEstablished *int   `json:"players_established,omitempty"`
	Forwarded          uint64 `json:"forwarded,omitempty"`
	Draining           bool   `json:"draining,omitempty"`
	// Handoff is the protocol the relay hands its socket over with
	// ("unix/1"), on HandoffSocket; "" for a relay that does not.
	Handoff       string `json:"handoff,omitempty"`
	HandoffSocket string `json:"handoff_socket,omitempty"`
	// After a handoff: the relay it took over from, and the gap between the
	// old one's last read and its first, in microseconds.
	HandoffFromPID int    `json:"handoff_from_pid,omitempty"`
	HandoffGapUS   *int64 `json:"handoff_gap_us,omitempty"`
	HandoffLobbies int    `json:"handoff_lobbies,omitempty"`
	HandoffPlayers int    `json:"handoff_players,omitempty"`
	// FDStore is "systemd/1" when the relay keeps its socket and lobbies in
	// systemd's file-descriptor store; SocketFrom where its socket came
	// from (bound, handoff, fdstore); FDStoreState the state it restored
	// (final after a clean stop, periodic after a crash).
	FDStore      string `json:"fdstore,omitempty"`
	SocketFrom   string `json:"socket_from,omitempty"`
	FDStoreState string `json:"fdstore_state,omitempty"`
}

// SysctlFact is a runtime value read from /proc/sys.
type SysctlFact struct {
	Exists   bool   `json:"exists"`
	Value    string `json:"value"` // as read, whitespace kept
	Writable bool   `json:"writable"`
}

// ConfFile is a sysctl.d file found on the host (or /etc/sysctl.conf).
type ConfFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// RelayRelease is what is installed under the releases folder.
type RelayRelease struct {
	Current    string   `json:"current"`     // version the current link points at, "" if none or not a release folder
	CurrentRaw string   `json:"current_raw"` // the link target as read
	Installed  []string `json:"installed"`   // versions present under the releases folder
	RunningExe string   `json:"running_exe"` // /proc/PID/exe of the running relay
	// Stored are the release store's entries (sha256), the most recently
	// stored first.
	Stored []string `json:"stored,omitempty"`
	// Decoders are the forms of an upload the host can decode (package
	// wire): gzip, zstd, and zstd-patch where its zstd takes --patch-from
	// (1.4.5 and later). Never part of the fingerprint: a host that gains
	// or loses one is sent another form, nothing else changes.
	Decoders []string `json:"decoders,omitempty"`
}

// File is the fact of a file a template renders; absent when observe
// did not read it.
func (f *Facts) File(path string) FileFact { return f.Files[path] }

// FileFact is a file's content, or its absence.
type FileFact struct {
	Exists  bool   `json:"exists"`
	Content string `json:"content"`
	// Masked: Content has every line that may hold a secret masked
	// (MaskConfig), as relayctl facts --json prints a relay config.
	Masked bool `json:"masked,omitempty"`
	// Unsafe says why observe did not read the file (a symlink, a folder
	// others can write); Exists and Content are then empty.
	Unsafe string `json:"unsafe,omitempty"`
}

// ServiceFact is the relay's service state.
type ServiceFact struct {
	Running bool   `json:"running"`
	PID     int    `json:"pid"`
	Detail  string `json:"detail,omitempty"` // what the manager said when not running
	// FoundBy says how the process was found when nothing named it (no
	// pid file or unit: by its socket on the port).
	FoundBy string `json:"found_by,omitempty"`
	// UnitMissing: systemd has no such unit (LoadState not-found).
	UnitMissing bool `json:"unit_missing,omitempty"`
	// What systemd says of the unit: its restarts so far (NRestarts), the
	// id of its current run, and ActiveState.
	Restarts     int    `json:"restarts,omitempty"`
	InvocationID string `json:"invocation_id,omitempty"`
	ActiveState  string `json:"active_state,omitempty"`
	SubState     string `json:"sub_state,omitempty"`
	// The unit's file-descriptor store: its size (FileDescriptorStoreMax)
	// and the fds in it now (NFileDescriptorStore).
	FDStoreMax int `json:"fdstore_max,omitempty"`
	FDStored   int `json:"fdstore_fds,omitempty"`
}

// SocketFact is the relay socket read back from the kernel, in the relay
// process's network namespace.
type SocketFact struct {
	Found        bool   `json:"found"`
	Port         int    `json:"port"`
	Rcvbuf       uint64 `json:"rb"`    // ss skmem rb
	Drops        uint64 `json:"drops"` // ss skmem d
	ProcUDPDrops uint64 `json:"proc_net_udp_drops"`
	RcvbufErrors uint64 `json:"snmp_rcvbuf_errors"` // Udp RcvbufErrors of the namespace
	InErrors     uint64 `json:"snmp_in_errors"`
	InDatagrams  uint64 `json:"snmp_in_datagrams,omitempty"` // Udp InDatagrams of the namespace: the traffic beside the drops
	Sockets      int    `json:"sockets,omitempty"`           // bound UDP sockets on the port (more than one with SO_REUSEPORT); Drops sums them
	OwnNetns     bool   `json:"own_netns"`                   // the relay runs in a namespace other than the SSH session's
	Inode        uint64 `json:"inode,omitempty"`             // ss -e ino: the same inode is the same socket
	// All are every socket of the service on the port, the first one
	// included (Rcvbuf, Inode), when it has more than one: several worker
	// processes, SO_REUSEPORT, IPv4 and IPv6. Each is read back.
	All []SocketEntry `json:"all,omitempty"`
}

// SocketEntry is one of the service's sockets on the port.
type SocketEntry struct {
	Local  string `json:"local"` // its address, without the port
	Rcvbuf uint64 `json:"rb"`
	Drops  uint64 `json:"drops"`
	Inode  uint64 `json:"inode,omitempty"`
	PID    int    `json:"pid,omitempty"` // the process that holds it
}

// FactsFile is the document `relayctl facts --json` prints and
// `relayctl plan --facts` reads.
type FactsFile struct {
	FormatVersion int      `json:"format_version"`
	Hosts         []*Facts `json:"hosts"`
	// Unreachable are the hosts that could not be read, with why: a plan
	// made from the file holds them as unreachable.
	Unreachable []UnreachableFact `json:"unreachable,omitempty"`
}

// UnreachableFact is a host relayctl could not read, and why.
type UnreachableFact struct {
	Host  string `json:"host"`
	Error string `json:"error"`
}

// FactsFormatVersion is the version of the FactsFile layout.
const FactsFormatVersion = 1

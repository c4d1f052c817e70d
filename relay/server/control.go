package server

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/relayctl/relayctl/relay/handoff"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is the JSON that GET /status returns; relayctl's read-back decodes
// it.
type Status struct {
	Version           string `json:"version"`
	PID               int    `json:"pid"`
	Listen            string `json:"listen"`
	Control           string `json:"control"`
	SORcvbufRequested int    `json:"so_rcvbuf_requested"`
	SORcvbufForce     bool   `json:"so_rcvbuf_force"`
	SORcvbufEffective int    `json:"so_rcvbuf_effective"` // getsockopt: the doubled value, rb in ss
	RmemMaxAtStart    int    `json:"rmem_max_at_start"`
	Lobbies           int    `json:"lobbies"`
	Players           int    `json:"players"`
	// PlayersEstablished counts the players that have played at least
	// lobby.EstablishedAfter (5 s): the relay forwarded their datagrams
	// that long. A stranger's join that goes silent never counts, so a
	// soak judges the players it loses by this (docs/soak.md).
	PlayersEstablished int       `json:"players_established"`
	Counters           Counters  `json:"counters"`
	StartedAt          time.Time `json:"started_at"`

	// Draining: the drain gate is on (POST /drain): datagrams for lobbies
	// that do not exist yet are refused, existing lobbies play out.
	Draining bool `json:"draining"`
	// SocketInode is the UDP socket's inode (ss -e ino:): the same number
	// before and after a handoff proves the socket was not replaced.
	SocketInode uint64 `json:"socket_inode"`
	// Handoff is the handoff protocol this process serves on its handoff
	// socket ("unix/1"), "" when it has none (RELAYD_HANDOFF_SOCKET unset).
	Handoff       string `json:"handoff"`
	HandoffSocket string `json:"handoff_socket,omitempty"`
	// HandoffFromPID is the relayd this process took its socket over from,
	// 0 when it bound the socket itself; the fields after it are set only
	// then.
	HandoffFromPID int `json:"handoff_from_pid"`
	// HandoffGapUS: microseconds from the old process's last read of a
	// datagram to this process's first; absent until that first read.
	HandoffGapUS *int64 `json:"handoff_gap_us,omitempty"`
	// HandoffPauseUS: microseconds during which no process read the socket
	// (the old one stopped reading, this one started).
	HandoffPauseUS *int64 `json:"handoff_pause_us,omitempty"`
	// HandoffLobbies and HandoffPlayers: what the lobby table held when it
	// was handed over, all of which this process restored.
	HandoffLobbies int `json:"handoff_lobbies,omitempty"`
	HandoffPlayers int `json:"handoff_players,omitempty"`

	// SocketFrom is where this process got its UDP socket: "bound" (it
	// bound it), "handoff" (from the relayd before it, over the handoff
	// socket) or "fdstore" (from systemd's file-descriptor store). With
	// "fdstore" and a state restored, the handoff_* fields above describe
	// the relayd that saved it.
	SocketFrom string `json:"socket_from"`
	// FDStore is "systemd/1" when this process keeps its UDP socket and its
	// state in systemd's file-descriptor store (docs/systemd.md), "" when
	// it does not; FDStoreOff says why not when systemd runs it, and
	// FDStoreMax is the store's size (FDSTORE) when it does.
	FDStore    string `json:"fdstore"`
	FDStoreOff string `json:"fdstore_off,omitempty"`
	FDStoreMax int    `json:"fdstore_max,omitempty"`
	// FDStoreState is the state this process restored from the store:
	// "final" (saved by a relayd as it stopped) or "periodic" (the last
	// regular save of one that did not stop cleanly); absent when none.
	// FDStoreStateAgeUS is its age when restored, in microseconds.
	FDStoreState      string `json:"fdstore_state,omitempty"`
	FDStoreStateAgeUS *int64 `json:"fdstore_state_age_us,omitempty"`
	// FDStoreSaves counts this process's saves of its state in the store,
	// FDStoreSavedAt is the last one.
	FDStoreSaves   uint64     `json:"fdstore_saves,omitempty"`
	FDStoreSavedAt *time.Time `json:"fdstore_saved_at,omitempty"`
	// FDStoreError is the last failure to keep something in the store.
	FDStoreError string `json:"fdstore_error,omitempty"`
}

// Counters count since the socket was created: a process that takes the
// socket over carries on from its predecessor's counters. Every datagram
// read is counted once by what became of it:
//
//	RxPackets = Forwarded + NotJoined + OtherVersion + Malformed
//	          + JoinChallenged + Joined + LobbyFull + RefusedDraining + SourceLimit
//
// TxPackets counts the copies of datagrams sent, so it is 7*Forwarded in
// full lobbies of eight; Replies counts the handshake's answers apart.
// RxDrops is the socket's kernel drop count (SO_RXQ_OVFL), which reaches
// the relay with the next datagram it reads.
type Counters struct {
	RxPackets      uint64 `json:"rx_packets"`
	RxBytes        uint64 `json:"rx_bytes"`
	TxPackets      uint64 `json:"tx_packets"`
	TxBytes        uint64 `json:"tx_bytes"`
	TxErrors       uint64 `json:"tx_errors"`
	RxDrops        uint64 `json:"rx_drops"`
	Malformed      uint64 `json:"malformed"`
	Forwarded      uint64 `json:"forwarded"`
	LobbyFull      uint64 `json:"lobby_full"`
	ExpiredPlayers uint64 `json:"expired_players"`
	// RefusedDraining counts joins of new lobbies refused while draining.
	RefusedDraining uint64 `json:"refused_draining"`

	// The join handshake. NotJoined: data datagrams from an address that
	// is not a member of their lobby (challenged if at least 40 bytes).
	// OtherVersion: datagrams of another wire version (refused, same
	// condition). JoinsRx: join datagrams read, whatever became of them.
	// JoinChallenged: joins without a valid cookie, answered with a
	// challenge; CookieRejected: those of them whose cookie was expired,
	// forged or another address's. Joined: joins with a valid cookie that
	// made or kept the player a member. LobbyFull and SourceLimit: joins
	// with a valid cookie refused because the lobby was full, or the
	// address or its /24 held as many players as allowed. Replies and
	// ReplyBytes: the handshake's answers sent.
	NotJoined      uint64 `json:"not_joined"`
	OtherVersion   uint64 `json:"other_version"`
	JoinsRx        uint64 `json:"joins_rx"`
	JoinChallenged uint64 `json:"join_challenged"`
	CookieRejected uint64 `json:"cookie_rejected"`
	Joined         uint64 `json:"joined"`
	SourceLimit    uint64 `json:"source_limit"`
	Replies        uint64 `json:"replies"`
	ReplyBytes     uint64 `json:"reply_bytes"`
}

// Status returns the relay's state now.
func (s *Server) Status() Status {
	s.mu.Lock()
	lobbies, players, draining := s.table.Lobbies(), s.table.Players(), s.table.NoNewLobbies()
	established := s.table.Established()
	s.mu.Unlock()
	s.bufMu.Lock()
	requested, force, effective := s.cfg.SORcvbuf, s.cfg.SORcvbufForce, s.effective
	s.bufMu.Unlock()
	var malformed uint64
	for i := range s.c.malformed {
		malformed += s.c.malformed[i].Load()
	}
	st := Status{
		Version:            s.version,
		PID:                os.Getpid(),
		Listen:             s.ListenAddr().String(),
		Control:            s.ControlAddr().String(),
		SORcvbufRequested:  requested,
		SORcvbufForce:      force,
		SORcvbufEffective:  effective,
		RmemMaxAtStart:     s.rmemMax,
		Lobbies:            lobbies,
		Players:            players,
		PlayersEstablished: established,
		Counters: Counters{
			RxPackets:       s.c.rxPackets.Load(),
			RxBytes:         s.c.rxBytes.Load(),
			TxPackets:       s.c.txPackets.Load(),
			TxBytes:         s.c.txBytes.Load(),
			TxErrors:        s.c.txErrors.Load(),
			RxDrops:         s.c.rxDrops.Load(),
			Malformed:       malformed,
			Forwarded:       s.c.forwarded.Load(),
			LobbyFull:       s.c.lobbyFull.Load(),
			ExpiredPlayers:  s.c.expired.Load(),
			RefusedDraining: s.c.refusedDraining.Load(),
			NotJoined:       s.c.notJoined.Load(),
			OtherVersion:    s.c.otherVersion.Load(),
			JoinsRx:         s.c.joinsRx.Load(),
			JoinChallenged:  s.c.joinChallenged.Load(),
			CookieRejected:  s.c.cookieRejected.Load(),
			Joined:          s.c.joined.Load(),
			SourceLimit:     s.c.sourceLimit.Load(),
			Replies:         s.c.replies.Load(),
			ReplyBytes:      s.c.replyBytes.Load(),
		},
		StartedAt:   s.started.UTC(),
		Draining:    draining,
		SocketInode: s.inode,
	}
	if s.handoffLn != nil {
		st.Handoff, st.HandoffSocket = handoff.Protocol, s.handoffLn.Path()
	}
	s.storeStatus(&st)
	if f := s.from; f != nil {
		st.HandoffFromPID = f.fromPID
		st.HandoffLobbies, st.HandoffPlayers = f.lobbies, f.players
		pause := (f.reading - f.paused) / 1e3
		st.HandoffPauseUS = &pause
		if first := s.firstRead.Load(); first > 0 && f.lastRead > 0 {
			gap := (first - f.lastRead) / 1e3
			st.HandoffGapUS = &gap
		}
	}
	return st
}

// drain turns the drain gate on or off (POST and DELETE /drain). The
// control plane listens on loopback only; drainRefused keeps a browser on
// the relay host from calling it for a web page (a cross-site POST
// carries an Origin header), and any local user but root and the relay's
// own from refusing the relay's new lobbies, or lifting a rollout's drain.
// A refusal is logged: someone on the host tried.
func (s *Server) drain(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if why := s.drainRefused(r); why != "" {
			s.log.Warn("drain refused", "from", r.RemoteAddr, "method", r.Method, "why", why)
			http.Error(w, "drain: refused: "+why, http.StatusForbidden)
			return
		}
		s.mu.Lock()
		s.table.SetNoNewLobbies(on)
		lobbies, players := s.table.Lobbies(), s.table.Players()
		s.mu.Unlock()
		if on {
			s.log.Info("draining: no new lobbies", "lobbies", lobbies, "players", players)
		} else {
			s.log.Info("drain ended: new lobbies welcome", "lobbies", lobbies, "players", players)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(struct {
			Draining bool `json:"draining"`
			Lobbies  int  `json:"lobbies"`
			Players  int  `json:"players"`
		}{on, lobbies, players})
	}
}

func (s *Server) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics{s},
	)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.Status())
	})
	mux.HandleFunc("POST /drain", s.drain(true))
	mux.HandleFunc("DELETE /drain", s.drain(false))
	return loopbackHost(mux)
}

// loopbackHost refuses a request whose Host is not a loopback name or
// address. The control plane listens on loopback only, but a web page can
// still reach it through a browser on the relay host by DNS rebinding (its
// own name resolving to 127.0.0.1): the browser then sends the page's name
// as Host, which this refuses. A request without Host (HTTP/1.0, as
// relayctl's host agent sends) is no browser's and is served.
func loopbackHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLoopbackHost(r.Host) {
			http.Error(w, "misdirected request: relayd's control plane answers only to Host localhost, 127.0.0.0/8 or [::1]", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopbackHost reports whether host (a Host header: name or address,
// maybe a port) names this machine's loopback: localhost, an address in
// 127.0.0.0/8 in dotted-quad form, or [::1]. "" (no Host) is accepted.
func isLoopbackHost(host string) bool {
	if host == "" {
		return true
	}
	name, port := host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		name, port = host[:i], host[i+1:]
	}
	if len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return false
	}
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		a, err := netip.ParseAddr(name[1 : len(name)-1])
		return err == nil && a == netip.IPv6Loopback()
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(name)
	return err == nil && a.Is4() && a.IsLoopback()
}

// metrics reads the relay's counters at scrape time rather than keeping a
// second copy of them.
type metrics struct{ s *Server }

var (
	descRxPackets   = desc("rx_packets_total", "Datagrams received on the relay socket.")
	descRxBytes     = desc("rx_bytes_total", "Bytes of datagrams received.")
	descTxPackets   = desc("tx_packets_total", "Datagram copies sent to players.")
	descTxBytes     = desc("tx_bytes_total", "Bytes of datagram copies sent.")
	descTxErrors    = desc("tx_errors_total", "Datagram copies the kernel refused to send.")
	descRxDrops     = desc("rx_drops_total", "Datagrams the kernel dropped on the relay socket (SO_RXQ_OVFL), as d in ss -u -m.")
	descMalformed   = prometheus.NewDesc("relayd_malformed_total", "Datagrams dropped as malformed, by reason.", []string{"reason"}, nil)
	descForwarded   = desc("forwarded_total", "Datagrams forwarded to the other members of their lobby.")
	descLobbyFull   = desc("lobby_full_total", "Joins with a valid cookie refused because their lobby was full.")
	descRefused     = desc("refused_draining_total", "Joins of new lobbies refused while draining.")
	descNotJoined   = desc("not_joined_total", "Data datagrams from an address that is not a member of their lobby, dropped.")
	descOtherVer    = desc("other_version_total", "Datagrams of another wire version, dropped.")
	descJoinsRx     = desc("joins_received_total", "Join datagrams read.")
	descChallenged  = desc("join_challenged_total", "Joins without a valid cookie, answered with a challenge.")
	descRejected    = desc("cookie_rejected_total", "Joins whose cookie was expired, forged or another address's.")
	descJoined      = desc("joined_total", "Joins with a valid cookie that made or kept the player a member.")
	descSourceLimit = desc("source_limit_total", "Joins with a valid cookie refused by a per-source limit.")
	descReplies     = desc("replies_total", "Handshake answers sent (challenges, welcomes, refusals).")
	descReplyBytes  = desc("reply_bytes_total", "Bytes of handshake answers sent.")
	descDraining    = desc("draining", "1 while the drain gate refuses new lobbies.")
	descExpired     = desc("expired_players_total", "Players removed after the idle timeout.")
	descLobbies     = desc("lobbies", "Lobbies with at least one player.")
	descPlayers     = desc("players", "Players in all lobbies.")
	descEstablished = desc("players_established", "Players whose datagrams the relay has forwarded for at least 5 s.")
	descRequested   = desc("so_rcvbuf_requested_bytes", "SO_RCVBUF asked for at start or at the last SIGHUP (0: kernel default).")
	descEffective   = desc("so_rcvbuf_effective_bytes", "SO_RCVBUF read back with getsockopt at start or at the last SIGHUP (rb in ss).")
	descRmemMax     = desc("rmem_max_at_start_bytes", "net.core.rmem_max when relayd started.")
	descBuildInfo   = prometheus.NewDesc("relayd_build_info", "Always 1; the version label is relayd's release.", []string{"version"}, nil)
	descStartedTime = desc("start_time_seconds", "Unix time relayd started.")
)

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("relayd_"+name, help, nil, nil)
}

func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(m, ch)
}

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.s.Status()
	c := st.Counters
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descRxPackets, c.RxPackets)
	counter(descRxBytes, c.RxBytes)
	counter(descTxPackets, c.TxPackets)
	counter(descTxBytes, c.TxBytes)
	counter(descTxErrors, c.TxErrors)
	counter(descRxDrops, c.RxDrops)
	for r := range numReasons {
		ch <- prometheus.MustNewConstMetric(descMalformed, prometheus.CounterValue, float64(m.s.c.malformed[r].Load()), reasonNames[r])
	}
	counter(descForwarded, c.Forwarded)
	counter(descLobbyFull, c.LobbyFull)
	counter(descRefused, c.RefusedDraining)
	counter(descNotJoined, c.NotJoined)
	counter(descOtherVer, c.OtherVersion)
	counter(descJoinsRx, c.JoinsRx)
	counter(descChallenged, c.JoinChallenged)
	counter(descRejected, c.CookieRejected)
	counter(descJoined, c.Joined)
	counter(descSourceLimit, c.SourceLimit)
	counter(descReplies, c.Replies)
	counter(descReplyBytes, c.ReplyBytes)
	draining := 0.0
	if st.Draining {
		draining = 1
	}
	gauge(descDraining, draining)
	counter(descExpired, c.ExpiredPlayers)
	gauge(descLobbies, float64(st.Lobbies))
	gauge(descPlayers, float64(st.Players))
	gauge(descEstablished, float64(st.PlayersEstablished))
	gauge(descRequested, float64(st.SORcvbufRequested))
	gauge(descEffective, float64(st.SORcvbufEffective))
	gauge(descRmemMax, float64(st.RmemMaxAtStart))
	gauge(descStartedTime, float64(m.s.started.Unix()))
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, st.Version)
}

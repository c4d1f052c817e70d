package server

import (
	"encoding/json"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is the JSON that GET /status returns; relayctl's read-back decodes
// it.
type Status struct {
	Version           string    `json:"version"`
	PID               int       `json:"pid"`
	Listen            string    `json:"listen"`
	Control           string    `json:"control"`
	SORcvbufRequested int       `json:"so_rcvbuf_requested"`
	SORcvbufForce     bool      `json:"so_rcvbuf_force"`
	SORcvbufEffective int       `json:"so_rcvbuf_effective"` // getsockopt: the doubled value, rb in ss
	RmemMaxAtStart    int       `json:"rmem_max_at_start"`
	Lobbies           int       `json:"lobbies"`
	Players           int       `json:"players"`
	Counters          Counters  `json:"counters"`
	StartedAt         time.Time `json:"started_at"`
}

// Counters count since start. RxPackets = Forwarded + Malformed + LobbyFull;
// TxPackets counts the copies sent, so it is 7*Forwarded in full lobbies of
// eight. RxDrops is the socket's kernel drop count (SO_RXQ_OVFL), which
// reaches the relay with the next datagram it reads.
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
}

// Status returns the relay's state now.
func (s *Server) Status() Status {
	s.mu.Lock()
	lobbies, players := s.table.Lobbies(), s.table.Players()
	s.mu.Unlock()
	var malformed uint64
	for i := range s.c.malformed {
		malformed += s.c.malformed[i].Load()
	}
	return Status{
		Version:           s.version,
		PID:               os.Getpid(),
		Listen:            s.ListenAddr().String(),
		Control:           s.ControlAddr().String(),
		SORcvbufRequested: s.cfg.SORcvbuf,
		SORcvbufForce:     s.cfg.SORcvbufForce,
		SORcvbufEffective: s.effective,
		RmemMaxAtStart:    s.rmemMax,
		Lobbies:           lobbies,
		Players:           players,
		Counters: Counters{
			RxPackets:      s.c.rxPackets.Load(),
			RxBytes:        s.c.rxBytes.Load(),
			TxPackets:      s.c.txPackets.Load(),
			TxBytes:        s.c.txBytes.Load(),
			TxErrors:       s.c.txErrors.Load(),
			RxDrops:        s.c.rxDrops.Load(),
			Malformed:      malformed,
			Forwarded:      s.c.forwarded.Load(),
			LobbyFull:      s.c.lobbyFull.Load(),
			ExpiredPlayers: s.c.expired.Load(),
		},
		StartedAt: s.started.UTC(),
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
	return mux
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
	descLobbyFull   = desc("lobby_full_total", "Datagrams dropped because their lobby was full.")
	descExpired     = desc("expired_players_total", "Players removed after the idle timeout.")
	descLobbies     = desc("lobbies", "Lobbies with at least one player.")
	descPlayers     = desc("players", "Players in all lobbies.")
	descRequested   = desc("so_rcvbuf_requested_bytes", "SO_RCVBUF asked for at start (0: kernel default).")
	descEffective   = desc("so_rcvbuf_effective_bytes", "SO_RCVBUF read back with getsockopt at start (rb in ss).")
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
	counter(descExpired, c.ExpiredPlayers)
	gauge(descLobbies, float64(st.Lobbies))
	gauge(descPlayers, float64(st.Players))
	gauge(descRequested, float64(st.SORcvbufRequested))
	gauge(descEffective, float64(st.SORcvbufEffective))
	gauge(descRmemMax, float64(st.RmemMaxAtStart))
	gauge(descStartedTime, float64(m.s.started.Unix()))
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, st.Version)
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Control reads the relay's counters from its control plane (GET /status).
type Control struct {
	URL    string
	Client *http.Client
}

// NewControl accepts host:port or a full http URL of the status endpoint.
func NewControl(addr string, timeout time.Duration) *Control {
	u := addr
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		u = "http://" + u
	}
	if !strings.HasSuffix(u, "/status") {
		u = strings.TrimSuffix(u, "/") + "/status"
	}
	return &Control{URL: u, Client: &http.Client{Timeout: timeout}}
}

// Status reads the counters once.
func (c *Control) Status(ctx context.Context) (Counters, error) {
	rd, err := c.Read(ctx)
	return rd.Counters, err
}

// Read reads the counters and the relay's identity once.
func (c *Control) Read(ctx context.Context) (Reading, error) {
	b, err := c.get(ctx)
	if err != nil {
		return Reading{}, err
	}
	cs, err := decodeStatus(b)
	if err != nil {
		return Reading{}, err
	}
	// relayd's pid, started_at, lobbies, players and handoff fields; a
	// relay without them has an unknown identity.
	var id Identity
	json.Unmarshal(b, &id)
	return Reading{Counters: cs, Identity: id}, nil
}

// Rcvbuf reads the relay socket's receive buffer as the relay reports it
// (relayd's so_rcvbuf_effective, getsockopt's doubled value, rb in ss); 0
// when the relay does not say.
func (c *Control) Rcvbuf(ctx context.Context) (int, error) {
	b, err := c.get(ctx)
	if err != nil {
		return 0, err
	}
	return decodeRcvbuf(b)
}

func (c *Control) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("read relay status: %w", err)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read relay status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("read relay status %s: %s: %s", c.URL, resp.Status, strings.TrimSpace(string(b)))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read relay status %s: %w", c.URL, err)
	}
	return b, nil
}

// decodeRcvbuf reads so_rcvbuf_effective from relayd's status document.
func decodeRcvbuf(b []byte) (int, error) {
	var doc struct {
		Effective int `json:"so_rcvbuf_effective"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, fmt.Errorf("decode relay status: %w", err)
	}
	return max(doc.Effective, 0), nil
}

// decodeStatus reads the counters from relayd's status document, where they
// sit under "counters", or from a relay that serves them at the top level.
func decodeStatus(b []byte) (Counters, error) {
	var doc struct {
		Counters *Counters `json:"counters"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return Counters{}, fmt.Errorf("decode relay status: %w", err)
	}
	if doc.Counters != nil {
		return *doc.Counters, nil
	}
	var flat Counters
	if err := json.Unmarshal(b, &flat); err != nil {
		return Counters{}, fmt.Errorf("decode relay status: %w", err)
	}
	return flat, nil
}

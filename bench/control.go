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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return Counters{}, fmt.Errorf("read relay status: %w", err)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return Counters{}, fmt.Errorf("read relay status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return Counters{}, fmt.Errorf("read relay status %s: %s: %s", c.URL, resp.Status, strings.TrimSpace(string(b)))
	}
	var st Counters
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return Counters{}, fmt.Errorf("decode relay status %s: %w", c.URL, err)
	}
	return st, nil
}

package agent

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fetch against a real HTTP server: the file fetched once and kept, its
// sha256 checked, http(s) only across redirects, at most MAXSIZE bytes
// whatever the server says, TIMEOUT seconds in all; nothing written when
// any of it fails, and the session goes on.
func TestFetch(t *testing.T) {
	root, state := testRoot(t)
	data := []byte("relayd served over http\n")
	const cap = 1 << 20
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch p := r.URL.Path; {
		case p == "/relayd":
			w.Write(data)
		case strings.HasPrefix(p, "/hop/"): // /hop/N redirects N times, then to the file
			n, _ := strconv.Atoi(strings.TrimPrefix(p, "/hop/"))
			if n == 0 {
				http.Redirect(w, r, "/relayd", http.StatusFound)
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
		case p == "/to-ftp":
			http.Redirect(w, r, "ftp://127.0.0.1:1/relayd", http.StatusFound)
		case p == "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusMovedPermanently)
		case p == "/big": // over the cap, saying so
			w.Header().Set("Content-Length", strconv.Itoa(cap+1))
			w.Write(make([]byte, cap+1))
		case p == "/chunked": // 20 MB in chunks, no Content-Length
			chunk := make([]byte, 64<<10)
			for range 320 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		case p == "/slow":
			if wait(r, 3*time.Second) {
				w.Write(data)
			}
		case p == "/stall": // the headers at once, then the body stalls
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data[:5])
			w.(http.Flusher).Flush()
			if wait(r, 3*time.Second) {
				w.Write(data[5:])
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	sha := sha256Hex(data)
	store := func(sha string) string { return filepath.Join(root, "releases", ".sha256", sha, "relayd") }
	fetch := func(url, sha, timeout string) []string {
		return locked(t, state, req("fetch", 1, nil, nil, store(sha), sha, url, strconv.Itoa(cap), timeout), syncReq(), req("clock", 0, nil, nil))
	}
	wantPrefix(t, fetch(srv.URL+"/relayd", sha, "10"), "VAL fetched 24", "OK", "VAL ")
	fileIs(t, store(sha), data)
	if fi, _ := os.Stat(store(sha)); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %o, want 755", fi.Mode().Perm())
	}
	hits.Store(0)
	if got := fetch(srv.URL+"/relayd", sha, "10"); got[0] != "VAL kept" || hits.Load() != 0 {
		t.Errorf("a second fetch: %q after %d requests; want kept without one", got[0], hits.Load())
	}
	os.RemoveAll(filepath.Dir(store(sha)))
	wantPrefix(t, fetch(srv.URL+"/hop/4", sha, "10")[:1], "VAL fetched 24") // five redirects
	os.RemoveAll(filepath.Dir(store(sha)))

	other := strings.Repeat("1", 64)
	for _, c := range []struct{ name, url, timeout, want string }{
		{"other bytes", "/relayd", "10", "the file fetched from " + srv.URL + "/relayd has sha256 " + sha + ", want " + other + " (nothing was written)"},
		{"not found", "/missing", "10", "fetch " + srv.URL + "/missing: the requested URL returned error: 404 (nothing was written)"},
		{"six redirects", "/hop/5", "10", "fetch " + srv.URL + "/hop/5: more than 5 redirects; stopped there (nothing was written)"},
		{"a redirect to ftp", "/to-ftp", "10", "fetch " + srv.URL + "/to-ftp: a redirect to ftp://127.0.0.1:1/relayd, not http or https: refused (nothing was written)"},
		{"a redirect to a file", "/to-file", "10", "fetch " + srv.URL + "/to-file: a redirect to file:///etc/passwd, not http or https: refused (nothing was written)"},
		{"over the cap, said", "/big", "10", "fetch " + srv.URL + "/big: the server announces 1048577 bytes: more than 1048576 bytes (the cap); stopped there (nothing was written)"},
		{"over the cap, unsaid", "/chunked", "10", "fetch " + srv.URL + "/chunked: more than 1048576 bytes (the cap); stopped there (nothing was written)"},
		{"a slow server", "/slow", "1", "fetch " + srv.URL + "/slow: timed out after 1 seconds (nothing was written)"},
		{"a stalled body", "/stall", "1", "fetch " + srv.URL + "/stall: timed out after 1 seconds (nothing was written)"},
	} {
		got := fetch(srv.URL+c.url, other, c.timeout)
		if len(got) != 3 || got[0] != "ERR "+c.want || !strings.HasPrefix(got[2], "VAL ") {
			t.Errorf("%s: got %q, want ERR %s, then the clock", c.name, got, c.want)
		}
		if entries, _ := os.ReadDir(filepath.Dir(store(other))); len(entries) != 0 {
			t.Errorf("%s: left in the store: %v", c.name, entries)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"ftp://127.0.0.1/relayd", "ERR fetch ftp://127.0.0.1/relayd: not an http or https url (nothing was written)"},
		{"file:///etc/passwd", "ERR fetch file:///etc/passwd: not an http or https url (nothing was written)"},
	} {
		if got := fetch(c.url, other, "10"); got[0] != c.want {
			t.Errorf("got %q, want %q", got[0], c.want)
		}
	}
	for _, c := range []struct{ maxSize, timeout, want string }{
		{"1x", "10", "ERR fetch " + srv.URL + "/relayd: bad size cap \"1x\""},
		{"10", "0", "ERR fetch " + srv.URL + "/relayd: bad timeout \"0\""},
		{"10", "-1", "ERR fetch " + srv.URL + "/relayd: bad timeout \"-1\""},
	} {
		got := locked(t, state, req("fetch", 1, nil, nil, store(sha), sha, srv.URL+"/relayd", c.maxSize, c.timeout))
		if !strings.HasPrefix(got[0], c.want) {
			t.Errorf("got %q, want %q", got[0], c.want)
		}
	}
	// A symlink planted at the path is refused, never written through.
	victim := filepath.Join(root, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	os.MkdirAll(filepath.Dir(store(sha)), 0o755)
	os.Symlink(victim, store(sha))
	if got := fetch(srv.URL+"/relayd", sha, "10"); got[0] != "ERR "+store(sha)+" is a symlink; relayctl writes no file through or over a symlink" {
		t.Errorf("a symlink at the path: got %q", got[0])
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("wrote through a symlink: %q", b)
	}
}

// wait waits d, or less if the client goes away first (false then).
func wait(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

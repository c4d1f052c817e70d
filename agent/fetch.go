package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// maxRedirects is how many redirects a fetch follows, as curl
// --max-redirs 5 did for agent.sh.
const maxRedirects = 5

// maxFetchSeconds bounds a fetch's TIMEOUT: a day.
const maxFetchSeconds = 86400

// pFetch: PATH SHA256 URL MAXSIZE TIMEOUT, keep's bytes fetched by the
// host itself: over http or https only (redirects too), at most MAXSIZE
// bytes whatever the server says, in TIMEOUT seconds in all. VAL kept, or
// VAL fetched SIZE once the sha256 is checked; nothing written otherwise.
func pFetch(s *session, r *request) answer {
	path, sum, rawURL := r.arg(0), r.arg(1), r.arg(2)
	maxSize, err1 := strconv.ParseInt(r.arg(3), 10, 64)
	secs, err2 := strconv.Atoi(r.arg(4))
	switch {
	case !isSHA256(sum):
		return errf("fetch %s: bad sha256 %q", rawURL, sum)
	case err1 != nil || !digits(r.arg(3)):
		return errf("fetch %s: bad size cap %q", rawURL, r.arg(3))
	case err2 != nil || !digits(r.arg(4)) || secs < 1 || secs > maxFetchSeconds:
		return errf("fetch %s: bad timeout %q: want whole seconds, from 1 to %d", rawURL, r.arg(4), maxFetchSeconds)
	}
	held, err := holds(path, sum, -1, "")
	switch {
	case err != nil:
		return errf("%s", err)
	case held:
		return val("kept")
	}
	dir := filepath.Dir(path)
	t, err := freshTemp(dir)
	if err != nil {
		return errf("cannot create a file in %s", dir)
	}
	got, err := fetchURL(rawURL, maxSize, secs, t)
	if err != nil {
		os.Remove(t)
		return errf("fetch %s: %s (nothing was written)", rawURL, tail(err.Error(), 300))
	}
	return settle(t, got, path, sum, 0o755, "", "fetched", func(got string) answer {
		return errf("the file fetched from %s has sha256 %s, want %s (nothing was written)", rawURL, got, sum)
	})
}

// fetchURL fetches rawURL into the existing file t: at most maxSize bytes
// in secs seconds, http and https only, redirects included; the sha256 of
// what it wrote.
func fetchURL(rawURL string, maxSize int64, secs int, t string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !webScheme(u) || u.Host == "" {
		return "", errors.New("not an http or https url")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	timedOut := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("timed out after %d seconds", secs)
		}
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", err
	}
	resp, err := fetchClient().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", timedOut(err)
	}
	defer resp.Body.Close()
	if err := fetchStatus(resp, maxSize); err != nil {
		return "", err
	}
	n, sum, err := writeInto(t, resp.Body, maxSize)
	var werr writeError
	switch {
	case errors.As(err, &werr):
		return "", fmt.Errorf("cannot write the file: %s", errText(werr.err))
	case err != nil:
		return "", timedOut(err)
	case n > maxSize:
		return "", fmt.Errorf("more than %d bytes (the cap); stopped there", maxSize)
	}
	return sum, nil
}

// fetchStatus refuses an answer that is not the file: an error status (as
// curl -f), or a length the server announces beyond the cap.
func fetchStatus(resp *http.Response, maxSize int64) error {
	switch {
	case resp.StatusCode >= 400:
		return fmt.Errorf("the requested URL returned error: %d", resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("the server answered %s, not the file", resp.Status)
	case resp.ContentLength > maxSize:
		return fmt.Errorf("the server announces %d bytes: more than %d bytes (the cap); stopped there", resp.ContentLength, maxSize)
	}
	return nil
}

// fetchClient follows at most maxRedirects redirects, each to http or
// https. It takes the environment's proxy, as curl did, and asks for no
// compression: the bytes fetched are the file's, as the server keeps it.
func fetchClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	tr.DisableKeepAlives = true
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > maxRedirects {
			return fmt.Errorf("more than %d redirects; stopped there", maxRedirects)
		}
		if !webScheme(req.URL) {
			return fmt.Errorf("a redirect to %s, not http or https: refused", req.URL.Redacted())
		}
		return nil
	}}
}

func webScheme(u *url.URL) bool { return u.Scheme == "http" || u.Scheme == "https" }

package sshrun

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"os"
	"strings"

	"golang.org/x/crypto/ssh/knownhosts"
)

// certAuthorityFor finds a @cert-authority line whose host patterns match
// addr (host:port) in the known_hosts files, and returns its file and line.
// knownhosts checks certificates against such lines but has no lookup of
// its own, and a host only a CA vouches for must never look "new".
func certAuthorityFor(files []string, addr string) (string, int, bool) {
	host := knownhosts.Normalize(addr)
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		n := 0
		for sc.Scan() {
			n++
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 || fields[0] != "@cert-authority" {
				continue
			}
			if hostMatches(fields[1], host) {
				f.Close()
				return file, n, true
			}
		}
		f.Close()
	}
	return "", 0, false
}

// hostMatches applies a known_hosts pattern list (comma-separated, with *
// and ? wildcards, ! negation and |1|salt|hash hashed names) to host.
func hostMatches(patterns, host string) bool {
	matched := false
	for _, p := range strings.Split(patterns, ",") {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		var ok bool
		if strings.HasPrefix(p, "|1|") {
			ok = hashedMatch(p, host)
		} else {
			ok = wildcard(p, host)
		}
		if ok && neg {
			return false
		}
		matched = matched || ok
	}
	return matched
}

// wildcard matches s against a pattern where only * and ? are special, as
// OpenSSH's match_pattern does ("[host]:port" brackets are literal).
func wildcard(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if wildcard(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}

func hashedMatch(p, host string) bool {
	parts := strings.Split(p, "|")
	if len(parts) != 4 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	want, err2 := base64.StdEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil {
		return false
	}
	m := hmac.New(sha1.New, salt)
	m.Write([]byte(host))
	return hmac.Equal(m.Sum(nil), want)
}

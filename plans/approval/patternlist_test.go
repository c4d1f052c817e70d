package approval

import (
	"strings"
	"testing"
)

func TestMatchPatternList(t *testing.T) {
	for _, tt := range []struct {
		s, list string
		want    int
	}{
		{"relayctl-plan", "relayctl-plan", 1},
		{"relayctl-plan", "*,!relayctl-plan", -1},
		{"relayctl-plan", "!relayctl-plan,*", -1},
		{"relayctl-plan", "git,!file", 0},
		{"relayctl-plan", "", 0},
		{"relayctl-plan", "!", 0},
		{"relayctl-plan", "!!relayctl-plan", 0},
		{"!relayctl-plan", "!!relayctl-plan", -1},
		{"relayctl-plan", ",,relayctl-plan,,", 1},
		{"", ",", 1}, // the empty pattern before the comma matches the empty string
		{"relayctl-plan", "relayctl-*,!*-plan", -1},
		{"relayctl-plan", "relayctl-pla[n]", 0},
		{"relayctl-pla[n]", "relayctl-pla[n]", 1},
		{"relayctl-plan", strings.Repeat("*", maxSubpattern-1), 1},
		{"relayctl-plan", strings.Repeat("*", maxSubpattern), 0},
		{"relayctl-plan", "relayctl-plan," + strings.Repeat("*", maxSubpattern), 0},
	} {
		if got := matchPatternList(tt.s, tt.list); got != tt.want {
			t.Errorf("matchPatternList(%q, %.40q) = %d, want %d", tt.s, tt.list, got, tt.want)
		}
	}
}

// opensshMatchPattern is match.c's match_pattern as OpenSSH writes it,
// recursion and all: the reference matchPattern is checked against.
func opensshMatchPattern(s, p string) bool {
	for {
		if p == "" {
			return s == ""
		}
		if p[0] == '*' {
			for p != "" && p[0] == '*' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			if p[0] != '?' && p[0] != '*' {
				for ; s != ""; s = s[1:] {
					if s[0] == p[0] && opensshMatchPattern(s[1:], p[1:]) {
						return true
					}
				}
				return false
			}
			for ; s != ""; s = s[1:] {
				if opensshMatchPattern(s, p) {
					return true
				}
			}
			return false
		}
		if s == "" {
			return false
		}
		if p[0] != '?' && p[0] != s[0] {
			return false
		}
		s, p = s[1:], p[1:]
	}
}

// FuzzMatchPattern checks the linear matcher against OpenSSH's recursive
// one. Inputs are bounded: the reference is exponential in its stars.
func FuzzMatchPattern(f *testing.F) {
	for _, seed := range [][2]string{
		{"relayctl-plan", "relayctl-*"}, {"relayctl-plan", "*-p?an"}, {"aaaa", "*a*a"}, {"ab", "*?*?*"},
		{"", "*"}, {"*", "?"}, {"a*b", "a\\*b"}, {"mississippi", "*sip*"}, {"abcabd", "*abd"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, s, p string) {
		if len(s) > 24 || len(p) > 12 {
			return
		}
		if got, want := matchPattern(s, p), opensshMatchPattern(s, p); got != want {
			t.Fatalf("matchPattern(%q, %q) = %v, OpenSSH's %v", s, p, got, want)
		}
	})
}

// FuzzParseAllowedSigners: whatever a file holds, parsing ends with signers
// or an error naming a line, never a panic.
func FuzzParseAllowedSigners(f *testing.F) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFnqsgHVK00Rme+ncQih0bpyvSfByTAIHU7PtDRqf5LU"
	for _, seed := range []string{
		"alice@example.com " + key,
		`alice@example.com namespaces="*,!relayctl-plan" ` + key,
		`alice@example.com cert-authority,namespaces="x\"y",valid-after="20261130" ` + key + " comment",
		`"alice smith" namespaces="a b" ` + key,
		`alice namespaces="unclosed ` + key,
		"# comment\n\nalice " + key + "\nbob ,,\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		signers, err := ParseAllowedSigners(data, "allowed_signers")
		if err == nil && len(signers) == 0 {
			t.Fatal("no error and no signers")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "allowed_signers") && !strings.HasPrefix(err.Error(), "read allowed_signers") {
			t.Fatalf("an error that names no file: %v", err)
		}
		// Matching a parsed list never panics and answers one of its three
		// values; a list with the name negated after it never matches.
		for _, s := range signers {
			if r := matchPatternList(Namespace, s.Namespaces); r < -1 || r > 1 {
				t.Fatalf("matchPatternList(%q) = %d", s.Namespaces, r)
			}
			if s.Namespaces != "" && matchPatternList(Namespace, s.Namespaces+",!"+Namespace) == 1 {
				t.Fatalf("%q matched with the name negated after it", s.Namespaces)
			}
		}
	})
}

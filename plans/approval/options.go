package approval

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The options field of an allowed_signers line, read as OpenSSH reads it
// (sshsig.c's sshsigopt_parse, misc.c's opt_dequote): a comma-separated
// list of cert-authority, namespaces="…", valid-after="…" and
// valid-before="…", names in any case, values in double quotes (\" is a
// quote), each given at most once. A line OpenSSH refuses is refused here
// too, so one file means the same to relayctl and to ssh-keygen -Y verify.

// advancePastOptions splits the options field off the front of s: it ends
// at the first space or tab outside double quotes (sshkey_advance_past_options).
func advancePastOptions(s string) (opts, rest string, err error) {
	quoted := false
	i := 0
	for ; i < len(s) && (quoted || (s[i] != ' ' && s[i] != '\t')); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '"':
			i++
		case s[i] == '"':
			quoted = !quoted
		}
	}
	if quoted {
		return "", "", errors.New("options: a quote is not closed")
	}
	return s[:i], s[i:], nil
}

// parseOptions reads an options field into s.
func parseOptions(opts string, s *Signer) error {
	var afterSet, beforeSet bool
	for opts != "" {
		var err error
		switch {
		case hasPrefixFold(opts, "cert-authority"):
			s.CertAuthority = true
			opts = opts[len("cert-authority"):]
		case hasPrefixFold(opts, "namespaces="):
			if s.HasNamespaces {
				return errors.New(`options: "namespaces" is given twice`)
			}
			s.Namespaces, opts, err = dequote(opts[len("namespaces="):], "namespaces")
			s.HasNamespaces = true
		case hasPrefixFold(opts, "valid-after="):
			if afterSet {
				return errors.New(`options: "valid-after" is given twice`)
			}
			s.ValidAfter, opts, err = quotedTime(opts[len("valid-after="):], "valid-after")
			afterSet = true
		case hasPrefixFold(opts, "valid-before="):
			if beforeSet {
				return errors.New(`options: "valid-before" is given twice`)
			}
			s.ValidBefore, opts, err = quotedTime(opts[len("valid-before="):], "valid-before")
			beforeSet = true
		}
		if err != nil {
			return err
		}
		if opts == "" {
			break
		}
		// Anything but a comma here is an option OpenSSH does not know.
		if opts[0] != ',' {
			name, _, _ := strings.Cut(opts, "=")
			name, _, _ = strings.Cut(name, ",")
			return fmt.Errorf("unknown option %q (allowed_signers takes cert-authority, namespaces, valid-after, valid-before)", clip(name))
		}
		opts = opts[1:]
		if opts == "" {
			return errors.New("options: a comma ends them; remove it")
		}
	}
	if afterSet && beforeSet && !s.ValidBefore.After(s.ValidAfter) {
		return errors.New(`options: "valid-before" is not after "valid-after"`)
	}
	return nil
}

// dequote reads a double-quoted value at the start of s (opt_dequote): \"
// stands for a quote; the value must be quoted and the quote closed.
func dequote(s, name string) (value, rest string, err error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf(`options: %s wants its value in double quotes, e.g. %s="%s"`, name, name, example(name))
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case s[i] == '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", fmt.Errorf("options: the quote of %s is not closed", name)
}

func quotedTime(s, name string) (time.Time, string, error) {
	v, rest, err := dequote(s, name)
	if err != nil {
		return time.Time{}, "", err
	}
	t, err := parseSignerTime(v)
	return t, rest, err
}

func example(name string) string {
	if name == "namespaces" {
		return Namespace
	}
	return "20261201"
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// clip shortens text quoted in a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

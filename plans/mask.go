package plans

import (
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
	"github.com/relayctl/relayctl/relay/config"
)

// A relay config may hold secrets (an API_TOKEN= the operator keeps there,
// a DB_PASSWORD: written another way). None of it may reach a plan, a
// review, a receipt or a facts file, so wherever its content would, it is
// masked line by line (MaskLine): the value of a key whose name looks
// secret, and every line relayctl cannot read as KEY=VALUE (it may hold
// anything), shows as ••• with a short hash, so a reviewer still sees
// whether it changed. Comments are kept unless they hold a secret word.
// Plans made from masked facts (relayctl facts --json, plan --facts) hash
// the masked content, and FileChange.Masked says so.

// MaskConfig is a relay config with every line that may hold a secret
// masked.
func MaskConfig(content string) string { return maskLines(content, MaskLine) }

// maskLines masks each line of content with mask.
func maskLines(content string, mask func(string) string) string {
	if content == "" {
		return ""
	}
	lines := strings.Split(content, "\n")
	for i, l := range lines {
		lines[i] = mask(l)
	}
	return strings.Join(lines, "\n")
}

// MaskLine masks one line of a relay config (MaskConfig). A line that is
// exactly what MaskLine writes stays as it is, so masking masked facts
// changes nothing.
func MaskLine(l string) string {
	t := strings.TrimSpace(l)
	switch {
	case maskedLine.MatchString(l):
		return l
	case t == "":
		return l
	case strings.HasPrefix(t, "#"):
		if hasSecretWord(t) {
			return "# " + maskValue(t)
		}
		return l
	}
	as := config.Assignments([]byte(l))
	if len(as) != 1 {
		return maskValue(t) // not KEY=VALUE: it may hold anything
	}
	if IsSecretKey(as[0].Key) {
		return as[0].Key + "=" + maskValue(as[0].Value)
	}
	return l
}

// maskedLine is a line MaskLine wrote: a mask alone, after "# ", or as a
// key's value.
var maskedLine = lazyre.New(`^(# |[A-Za-z_][A-Za-z0-9_.]*=)?••• \(sha256:[0-9a-f]{12}\)$`)

// isMasked reports whether a line is one MaskLine wrote.
func isMasked(l string) bool { return maskedLine.MatchString(l) }

// MaskedSHA256 is the sha256 of content's masked form (MaskConfig): what a
// plan made from masked facts hashes a relay config by.
func MaskedSHA256(content string) string { return sha256Text(MaskConfig(content)) }

// hasSecretWord reports whether text names a secret (IsSecretKey's words).
func hasSecretWord(text string) bool { return IsSecretKey(text) }

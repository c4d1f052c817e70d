package inventory

import (
	"math"
	"math/big"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// Ansible loads YAML with PyYAML, which follows YAML 1.1: an unquoted yes,
// no, on or off is a boolean, 010 is 8, 1:30 is 90, 2024-01-05 is a date.
// go.yaml.in/yaml/v3 resolves plain scalars by YAML 1.2, so this file
// resolves them again with PyYAML's implicit resolvers (yaml/resolver.py).
var (
	yaml11Bool  = lazyre.New(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	yaml11Int   = lazyre.New(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	yaml11Float = lazyre.New(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	yaml11Null  = lazyre.New(`^(?:~|null|Null|NULL|)$`)
	yaml11Time  = lazyre.New(`^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4}-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9]{2})?))?)$`)
)

// scalarValue is what Ansible makes of a YAML scalar node (aliases already
// followed): its kind and text. An explicit tag decides where there is
// one: !unsafe is Ansible's untemplated string, !vault an encrypted one.
func scalarValue(n *yaml.Node) Value {
	v := Value{Line: n.Line}
	quoted := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	if n.Style&yaml.TaggedStyle != 0 {
		switch n.Tag {
		case "!!str", "!unsafe":
			v.Kind, v.Text = String, n.Value
		case "!!int":
			return yaml11IntValue(n.Value, n.Line)
		case "!!bool":
			if yaml11Bool.MatchString(n.Value) {
				v.Kind, v.Text = Bool, boolText(n.Value)
			} else {
				v.Kind = Complex
			}
		case "!!null":
			v.Kind = Null
		default: // !vault, !!float, !!binary, !!timestamp, custom tags
			v.Kind = Complex
		}
		return v
	}
	if quoted {
		v.Kind, v.Text = String, n.Value
		return v
	}
	s := n.Value
	switch {
	case yaml11Bool.MatchString(s):
		v.Kind, v.Text = Bool, boolText(s)
	case yaml11Int.MatchString(s):
		return yaml11IntValue(s, n.Line)
	case yaml11Float.MatchString(s):
		v.Kind, v.Text = Float, yaml11FloatText(s)
	case yaml11Null.MatchString(s):
		v.Kind = Null
	case yaml11Time.MatchString(s), s == "=":
		v.Kind = Complex
	default:
		v.Kind, v.Text = String, s
	}
	return v
}

func boolText(s string) string {
	switch strings.ToLower(s) {
	case "yes", "true", "on":
		return "true"
	}
	return "false"
}

// yaml11IntValue is PyYAML's construct_yaml_int.
func yaml11IntValue(s string, line int) Value {
	s = strings.ReplaceAll(s, "_", "")
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	n := new(big.Int)
	ok := true
	switch {
	case s == "0":
	case strings.HasPrefix(s, "0b"):
		_, ok = n.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = n.SetString(s[2:], 16)
	case strings.HasPrefix(s, "0"):
		_, ok = n.SetString(s, 8)
	case strings.Contains(s, ":"):
		for _, part := range strings.Split(s, ":") {
			d, _ := strconv.Atoi(part)
			n.Mul(n, big.NewInt(60)).Add(n, big.NewInt(int64(d)))
		}
	default:
		_, ok = n.SetString(s, 10)
	}
	if !ok {
		return Value{Kind: Complex, Line: line}
	}
	if neg {
		n.Neg(n)
	}
	return Value{Kind: Int, Text: n.String(), Line: line}
}

// yaml11FloatText is PyYAML's construct_yaml_float, formatted.
func yaml11FloatText(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
	sign := 1.0
	if s[0] == '-' || s[0] == '+' {
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	var f float64
	switch {
	case s == ".inf":
		f = math.Inf(1)
	case s == ".nan":
		f = math.NaN()
	case strings.Contains(s, ":"):
		parts := strings.Split(s, ":")
		for _, part := range parts {
			d, _ := strconv.ParseFloat(part, 64)
			f = f*60 + d
		}
	default:
		f, _ = strconv.ParseFloat(s, 64)
	}
	return strconv.FormatFloat(sign*f, 'g', -1, 64)
}

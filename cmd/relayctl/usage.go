package main

// Usage errors (a flag relayctl does not have, a value it cannot read, a
// required flag left out, a command that does not exist) are one
// "relayctl: error:" line on stderr with a valid example, a did-you-mean
// where a name is near one relayctl knows, and a hint pointing at --help.
// urfave/cli's own handling prints "Incorrect Usage" and the whole help
// page on stdout, where a script reading results would take it for one.

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"

	nearestword "github.com/relayctl/relayctl/internal/nearest"

	"github.com/urfave/cli/v2"
)

// requiredText is the DefaultText of a flag a command cannot run without.
// checkRequired enforces it (urfave/cli's Required would print the whole
// help page), and --help shows "(required)" instead of a default.
const requiredText = "required"

func init() {
	stock := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		s := strings.Replace(stock(f), "(default: "+requiredText+")", "("+requiredText+")", 1)
		return namePlaceholder(f, s)
	}
}

// namePlaceholder replaces urfave/cli's "--flag value" with a placeholder
// that says what the flag takes (--connect-timeout DURATION, --parallel
// N), for a flag whose usage names none between backquotes.
func namePlaceholder(f cli.Flag, s string) string {
	var ph string
	switch f.(type) {
	case *cli.DurationFlag:
		ph = "DURATION"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
		ph = "N"
	case *cli.Float64Flag:
		ph = "NUMBER"
	default:
		ph = "VALUE"
	}
	for _, n := range f.Names() {
		dash := "--"
		if len(n) == 1 {
			dash = "-"
		}
		s = strings.Replace(s, dash+n+" value", dash+n+" "+ph, 1)
	}
	return s
}

// usageError is a usage mistake: printed as one error and a hint.
func usageError(msg, hint string) error { return withHint(errors.New(msg), hint) }

// helpHint points at the help of the command the mistake was made in.
func helpHint(c *cli.Context) string {
	if where := commandName(c); where != "" {
		return fmt.Sprintf("relayctl %s --help lists its flags, with examples", where)
	}
	return "relayctl --help lists the commands"
}

// commandName is the command a mistake was made in: "size", or "" for a
// flag before any command.
func commandName(c *cli.Context) string {
	if c.Command == nil || c.Command.Name == c.App.Name {
		return ""
	}
	return c.Command.Name
}

// prefixed is "size --stall: msg", or "--stall: msg" before any command.
func prefixed(where, msg string) string {
	if where == "" {
		return msg
	}
	return where + " " + msg
}

var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	invalidValue  = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): `)
	needsArgument = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// onUsageError turns the flag parser's message into relayctl's.
func onUsageError(c *cli.Context, err error, _ bool) error {
	where := commandName(c)
	flags := c.App.Flags
	if where != "" {
		flags = c.Command.Flags
	}
	msg := err.Error()
	switch {
	case undefinedFlag.MatchString(msg):
		name := undefinedFlag.FindStringSubmatch(msg)[1]
		if dryRunFlags[name] {
			return usageError(prefixed(cmp.Or(where, "relayctl"), "has no flag --"+name+": a plan is relayctl's dry run"), dryRunHint)
		}
		text := prefixed(cmp.Or(where, "relayctl"), "has no flag --"+name)
		if near := nearest(name, flagNames(flags)); near != "" {
			text += fmt.Sprintf("; did you mean --%s?", near)
		}
		return usageError(text, helpHint(c))
	case invalidValue.MatchString(msg):
		m := invalidValue.FindStringSubmatch(msg)
		f := findFlag(flags, m[2])
		return usageError(prefixed(where, fmt.Sprintf("--%s: %q is not %s", m[2], m[1], valueExample(f, m[1]))), helpHint(c))
	case needsArgument.MatchString(msg):
		name := needsArgument.FindStringSubmatch(msg)[1]
		return usageError(prefixed(where, fmt.Sprintf("--%s needs a value, e.g. --%s %s", name, name, exampleValue(findFlag(flags, name)))), helpHint(c))
	}
	return usageError(prefixed(where, msg), helpHint(c))
}

// dryRunFlags are other tools' words for "show what would change"
// (ansible --check, kubectl --dry-run, puppet --noop, terraform's plan).
var dryRunFlags = map[string]bool{"dry-run": true, "dryrun": true, "check": true, "noop": true, "what-if": true, "diff": true}

// dryRunHint points at what relayctl does instead of a dry run.
const dryRunHint = "relayctl plan SPEC --out PLAN shows what apply would change on each host, without changing anything; relayctl stage PLAN does everything before the window (upload, checks) and changes nothing in force"

// unknownCommand is the app's action: it runs only when the first word is
// not a command (or there is none, when it shows the help, as asked).
func unknownCommand(c *cli.Context) error {
	if c.NArg() == 0 {
		return cli.ShowAppHelp(c)
	}
	name := c.Args().First()
	text := fmt.Sprintf("unknown command %q", name)
	if near := nearest(name, commandNames(c.App)); near != "" {
		text += fmt.Sprintf("; did you mean %s?", near)
	}
	return usageError(text, "relayctl --help lists the commands")
}

// checkRequired is every command's Before: a flag whose DefaultText is
// requiredText must be given.
func checkRequired(c *cli.Context) error {
	for _, f := range c.Command.Flags {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok || df.GetDefaultText() != requiredText || c.IsSet(f.Names()[0]) {
			continue
		}
		name := f.Names()[0]
		return usageError(fmt.Sprintf("%s needs --%s, e.g. --%s %s", c.Command.Name, name, name, exampleValue(f)), helpHint(c))
	}
	return nil
}

// examples are valid values of the flags whose type alone says too little.
var examples = map[string]string{
	"players":  "200",
	"relay":    "127.0.0.1:7788",
	"control":  "127.0.0.1:7789",
	"out":      "ashburn.plan",
	"waves":    "1,5,25%,100%",
	"headroom": "2",
	"factor":   "2",
}

// exampleValue is a valid value for f.
func exampleValue(f cli.Flag) string {
	if f == nil {
		return "VALUE"
	}
	if v, ok := examples[f.Names()[0]]; ok {
		return v
	}
	switch f.(type) {
	case *cli.DurationFlag:
		return "50ms"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
		return "10"
	case *cli.Float64Flag:
		return "2.5"
	case *cli.BoolFlag:
		return "true"
	}
	if df, ok := f.(cli.DocGenerationFlag); ok && df.TakesValue() {
		return "FILE"
	}
	return "VALUE"
}

// valueExample says what a flag takes, with an example, after "is not".
func valueExample(f cli.Flag, got string) string {
	switch f.(type) {
	case *cli.DurationFlag:
		if digitsOnly(got) {
			return fmt.Sprintf("a duration: give it a unit, e.g. %sms or %ss", got, got)
		}
		return "a duration, e.g. 50ms, 2s or 1m30s"
	case *cli.IntFlag, *cli.Int64Flag:
		return "a whole number, e.g. " + exampleValue(f)
	case *cli.UintFlag:
		return "a whole number from 0, e.g. " + exampleValue(f)
	case *cli.Float64Flag:
		return "a number, e.g. " + exampleValue(f)
	case *cli.BoolFlag:
		return "true or false (or give the flag alone)"
	}
	return "a valid value, e.g. " + exampleValue(f)
}

func digitsOnly(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func flagNames(flags []cli.Flag) []string {
	names := []string{"help"}
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	return names
}

// nearest is the flag or command closest to typed, when near enough to
// be what was meant (nearest.Word); one-letter aliases are never offered.
func nearest(typed string, candidates []string) string {
	var names []string
	for _, c := range candidates {
		if len(c) >= 2 {
			names = append(names, c)
		}
	}
	return nearestword.Word(typed, names)
}

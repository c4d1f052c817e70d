package main

// Output rules, written once:
//   - stdout carries results: tables, the plan summary, reviews (show),
//     --json documents. With --json, stdout is that one document and
//     nothing else; each names its layout with a format_version.
//   - stderr carries progress, errors ("relayctl: error: …"), warnings
//     ("relayctl: warning: …") and hints ("relayctl: hint: …").
//   - colour only on a terminal, never when stdout is a file or a pipe,
//     and never with NO_COLOR set or TERM=dumb (colorOn in show.go). Only
//     show colours; stderr never does.
//   - every string from a host, a spec or a plan goes through
//     plans.Visible (or the review's escaping) before it is printed.
//
// Exit codes are chosen here only: 0 success / nothing to change, 1 error,
// 2 changes planned (plan --detailed-exitcode), 3 live state differs from
// the plan (verify, exitDiffers), 4 short of a promise (bench --gate,
// size --spec; exitShort in size.go), 5 some host could not be looked at
// and none differs (verify, facts: exitCouldNotLook).

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
)

// Version and Commit are stamped at build time with -ldflags "-X
// main.Version=… -X main.Commit=…" (make build). The Makefile builds with
// -buildvcs=false, so that a checkout and a tarball of one commit build
// alike: the commit comes from the stamp, not from Go's VCS stamp.
var (
	Version = ""
	Commit  = ""
)

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// commit is the commit relayctl was built from: the stamp, else the VCS
// stamp go build records by default (vcs.revision, with "-dirty" when the
// tree had changes), else "" (a test binary, a build without either).
func commit() string {
	if Commit != "" {
		return Commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return vcsCommit(bi.Settings)
}

// vcsCommit is the commit in go build's VCS stamp, "" when it has none.
func vcsCommit(settings []debug.BuildSetting) string {
	var rev, dirty string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// versionText is what --version prints after "relayctl version".
func versionText() string {
	if c := commit(); c != "" {
		return version() + " (commit " + c + ")"
	}
	return version()
}

// Exit codes of verify and facts.
const (
	exitDiffers      = 3 // a host differs from the plan
	exitCouldNotLook = 5 // a host could not be read, and none differs
)

// exitCode lets a command choose a non-error exit status (2, 3) while still
// returning through urfave/cli normally.
type exitCode struct {
	code int
	err  error // optional: printed as an error when set
}

func (e *exitCode) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit %d", e.code)
}

// hintError carries a hint line printed after the error.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

func withHint(err error, hint string) error { return &hintError{err: err, hint: hint} }

// env is what a command needs from the process, injected so tests run the
// app in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func newApp(e *env) *cli.App {
	return &cli.App{
		Name:            "relayctl",
		Usage:           "tune relay hosts and roll out relay releases in one verified restart window",
		Version:         versionText(),
		Reader:          e.stdin,
		Writer:          e.stdout,
		ErrWriter:       e.stderr,
		HideHelpCommand: true,
		// relayctl completion: the scripts ask with --generate-bash-completion.
		EnableBashCompletion: true,
		ExitErrHandler:       func(*cli.Context, error) {}, // run() prints once and picks the code
		OnUsageError:         onUsageError,                 // usage.go: one line on stderr, not the help page
		Action:               unknownCommand,
		Commands:             commands(e),
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	defer startProfile(stderr)()
	app := newApp(e)
	if request, safe := completionRequest(args); request {
		if !safe {
			return 0 // after "--" the flag is an argument: run nothing
		}
		// The flag must stay last for urfave/cli to see the request.
		args = append(flagsFirst(app, args[:len(args)-1]), completeFlag)
	} else {
		args = flagsFirst(app, args)
	}
	err := app.Run(args)
	if err == nil {
		return 0
	}
	var ec *exitCode
	if errors.As(err, &ec) {
		if ec.err != nil {
			printError(stderr, ec.err)
		}
		return ec.code
	}
	printError(stderr, err)
	return 1
}

func printError(w io.Writer, err error) {
	// Every problem of a spec on its own line, each a relayctl: error.
	var se plans.SpecErrors
	if errors.As(err, &se) && len(se) > 1 {
		for _, e := range se {
			fmt.Fprintf(w, "relayctl: error: %s\n", plans.Visible(e.Error()))
		}
	} else {
		for _, l := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(w, "relayctl: error: %s\n", plans.Visible(l))
		}
	}
	var h *hintError
	if errors.As(err, &h) && h.hint != "" {
		fmt.Fprintf(w, "relayctl: hint: %s\n", h.hint)
	}
}

// flagsFirst lets flags follow positional arguments, as in
// "relayctl plan SPEC --out PLAN": urfave/cli/v2 stops reading flags at the
// first positional argument, so the subcommand's flags (and their values)
// are moved in front of its positional arguments. "--" ends the moving.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 3 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, rest []string
	in := args[2:]
	for i := 0; i < len(in); i++ {
		a := in[i]
		if a == "--" {
			rest = append(rest, in[i:]...)
			break
		}
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || a == "-" || name == "" {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue[name] && i+1 < len(in) {
			flags = append(flags, in[i+1])
			i++
		}
	}
	out := append([]string{args[0], args[1]}, flags...)
	return append(out, rest...)
}

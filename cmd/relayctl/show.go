package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func showCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print the review of a plan (or, with --json, the plan itself)",
		ArgsUsage: "PLAN",
		Description: `Loads the plan as apply does (its checksum, then the spec it records) and
prints its review, the PLAN.md that plan wrote, to stdout: warnings and
blockers first, then per host the sysctls, the release, the diffs of the
relay config and the sysctl drop-in, the expected read-back and the steps.
On a terminal, headings, blockers, warnings and diff lines are coloured;
never when stdout is a file or a pipe, nor when NO_COLOR is set.

With --json, prints the plan's JSON (its machine form, exactly the plan
file's bytes), for jq and CI: per host, each file relayctl writes
(hosts[].files: the relay config, the sysctl drop-in, ...) lists its
changes key by key (current, planned, managed, change).

Examples:
   relayctl show ashburn.plan
   relayctl show ashburn.plan | less -R
   relayctl show ashburn.plan --json | jq '.hosts[].files[] | select(.change) | {role, changes}'`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the plan's JSON instead of its review"},
		},
		Action: func(c *cli.Context) error { return runShow(c, e) },
	}
}

func runShow(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("show needs exactly one PLAN"), "relayctl show ashburn.plan")
	}
	file := c.Args().First()
	p, raw, err := inspectPlan(file)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		_, err := e.stdout.Write(raw)
		return err
	}
	review := p.Markdown(filepath.Base(file))
	if colorOn(e.stdout) {
		review = colorReview(review)
	}
	_, err = e.stdout.Write(review)
	return err
}

// colorOn applies the output rules (app.go): colour only on a terminal,
// never with NO_COLOR set (https://no-color.org) or TERM=dumb.
func colorOn(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// isTerminal asks the kernel whether f is a terminal (a char device is not
// enough: /dev/null is one).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// ANSI SGR sequences of the review's colours.
const (
	sgrReset  = "\x1b[0m"
	sgrBold   = "\x1b[1m"
	sgrRed    = "\x1b[31m"
	sgrGreen  = "\x1b[32m"
	sgrYellow = "\x1b[33m"
	sgrCyan   = "\x1b[36m"
)

// colorReview colours a review for a terminal: headings bold, blockers red,
// warnings yellow, and in the diff blocks added lines green, removed red,
// hunk headers cyan. The review's text is escaped already (no control
// character from a host or spec reaches here), so the only escape
// sequences are these.
func colorReview(md []byte) []byte {
	var b strings.Builder
	fence := "" // the fence of the diff block we are in
	for _, line := range strings.SplitAfter(string(md), "\n") {
		text := strings.TrimSuffix(line, "\n")
		color := ""
		switch {
		case fence != "":
			switch {
			case text == fence:
				fence = ""
			case strings.HasPrefix(text, "--- "), strings.HasPrefix(text, "+++ "):
				color = sgrBold
			case strings.HasPrefix(text, "@@ "):
				color = sgrCyan
			case strings.HasPrefix(text, "+"):
				color = sgrGreen
			case strings.HasPrefix(text, "-"):
				color = sgrRed
			}
		case strings.HasPrefix(text, "```") && strings.HasSuffix(text, "diff"):
			fence = strings.TrimSuffix(text, "diff")
		case strings.HasPrefix(text, "#"):
			color = sgrBold
		case strings.HasPrefix(text, "- **BLOCKED**"), strings.HasPrefix(text, "- **RUNS A PROGRAM AS ROOT**"):
			color = sgrRed
		case strings.HasPrefix(text, "- **warning**"):
			color = sgrYellow
		}
		if color == "" || text == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString(color + text + sgrReset + line[len(text):])
	}
	return []byte(b.String())
}

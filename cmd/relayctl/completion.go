package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/urfave/cli/v2"
)

// completeFlag is what a shell completion script appends to the words
// typed so far; urfave/cli then prints the candidates instead of running
// the command (EnableBashCompletion).
const completeFlag = "--generate-bash-completion"

func completionCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: `Prints the completion script for a shell: commands and their flags
complete, file names otherwise. make install puts the bash one in
PREFIX/share/bash-completion/completions/relayctl.

The scripts ask relayctl itself for candidates (relayctl ... --generate-bash-completion),
which prints them and runs nothing; they never eval what was typed, and
after "--" they leave completion to the shell's file names.

Examples:
   relayctl completion bash > /usr/local/share/bash-completion/completions/relayctl
   source <(relayctl completion bash)
   relayctl completion zsh > "${fpath[1]}/_relayctl"
   relayctl completion fish > ~/.config/fish/completions/relayctl.fish`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return withHint(errors.New("completion needs a shell: bash, zsh or fish"), "source <(relayctl completion bash)")
			}
			switch sh := c.Args().First(); sh {
			case "bash":
				fmt.Fprint(e.stdout, bashCompletion)
			case "zsh":
				fmt.Fprint(e.stdout, zshCompletion)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("make fish completion: %w", err)
				}
				fmt.Fprint(e.stdout, s)
			default:
				return fmt.Errorf("no completion for shell %q: want bash, zsh or fish", sh)
			}
			return nil
		},
	}
}

func manCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the manual page, relayctl(1), in roff",
		Description: `Prints relayctl(1), made from the same definitions as --help. make install
puts it in PREFIX/share/man/man1/relayctl.1.

Examples:
   relayctl man | man -l -
   relayctl man > /usr/local/share/man/man1/relayctl.1`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return withHint(errors.New("man takes no arguments"), "relayctl man | man -l -")
			}
			_, err := e.stdout.Write(roffASCII(md2man.Render([]byte(manMarkdown(c.App)))))
			return err
		},
	}
}

// completionRequest reports whether args ask for completions, and whether
// it is safe to answer: after "--" every word is an argument, so the
// request flag would reach a command as one; nothing runs then.
func completionRequest(args []string) (request, safe bool) {
	if len(args) < 2 || args[len(args)-1] != completeFlag {
		return false, true
	}
	return true, !slices.Contains(args[:len(args)-1], "--")
}

// bashCompletion asks relayctl for the candidates with the words typed
// before the cursor, passed as words (no eval), and falls back to file
// names.
var bashCompletion = strings.TrimLeft(`
# bash completion for relayctl (relayctl completion bash)
_relayctl() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	local -a words=("${COMP_WORDS[@]:0:COMP_CWORD}")
	local w
	COMPREPLY=()
	for w in "${words[@]}"; do
		[[ $w == -- ]] && return 0
	done
	local -a ask=("${words[@]:1}")
	[[ $cur == -* ]] && ask+=("$cur")
	local opts
	opts=$("${words[0]}" "${ask[@]}" `+completeFlag+` 2>/dev/null) || return 0
	mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
}
complete -o bashdefault -o default -F _relayctl relayctl
`, "\n")

var zshCompletion = strings.TrimLeft(`
#compdef relayctl
# zsh completion for relayctl (relayctl completion zsh)
_relayctl() {
	local -a opts ask
	local cur=${words[CURRENT]}
	if (( ${words[(I)--]} )) && (( ${words[(I)--]} < CURRENT )); then
		_files
		return
	fi
	ask=("${(@)words[2,CURRENT-1]}")
	[[ $cur == -* ]] && ask+=("$cur")
	opts=("${(@f)$(${words[1]} "${(@)ask}" `+completeFlag+` 2>/dev/null)}")
	if [[ -n ${opts[1]} ]]; then
		_describe 'values' opts
	else
		_files
	fi
}
compdef _relayctl relayctl
`, "\n")

// manMarkdown is relayctl(1) in the Markdown go-md2man reads, made from
// the commands' own definitions: each command's usage line, its whole
// description (examples and exit status included) and its flags, as
// --help shows them. urfave/cli's own ToMan leaves the descriptions out.
func manMarkdown(app *cli.App) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# relayctl 1\n\n# NAME\n\nrelayctl - %s\n\n", app.Usage)
	w("# SYNOPSIS\n\n**relayctl** *command* [*options*] [*arguments*]\n\n**relayctl** **--help** | **--version**\n\n")
	w("# DESCRIPTION\n\n%s\n\n", manText(`relayctl plans a sysctl change and the relay release that depends on it
for one restart window per host, applies both over SSH, proves the result
by reading the relay socket's receive buffer back from the kernel, rolls
back on failure and leaves a receipt. Flags may follow the arguments.
Results go to standard output, progress, warnings and errors to standard
error.`))
	w("# COMMANDS\n\n")
	for _, c := range app.Commands {
		if c.Hidden {
			continue
		}
		w("### relayctl %s %s\n\n%s\n\n", c.Name, manText(c.ArgsUsage), manText(c.Usage))
		if c.Description != "" {
			w("```\n%s\n```\n\n", strings.TrimRight(c.Description, "\n"))
		}
		if len(c.Flags) > 0 {
			w("Options:\n\n```\n")
			for _, f := range c.Flags {
				w("%s\n", strings.ReplaceAll(f.String(), "\t", "\n      "))
			}
			w("```\n\n")
		}
	}
	w("# EXIT STATUS\n\n%s\n\n", manText(`0 success or nothing to do; 1 an error; 2 plan --detailed-exitcode planned changes; 3 verify
found a host that differs from the plan; 4 bench --gate or size --spec
fell short of the promise; 5 verify or facts could not read some host
(and verify found none that differs).`))
	w("# ENVIRONMENT\n\n")
	w("**NO_COLOR**\n: when set, show prints no colour.\n\n")
	w("**RELAYCTL_REQUIRE_APPROVAL**\n: the allowed signers file apply and stage require a signature from, when --require-approval is not given.\n\n")
	w("**RELAYCTL_SSH_CONFIG**, **RELAYCTL_KNOWN_HOSTS**\n: the default of --ssh-config and --known-hosts (make lab's walkthrough sets them).\n\n")
	w("**SSH_AUTH_SOCK**\n: the ssh-agent relayctl uses for SSH keys and for approve.\n\n")
	w("# FILES\n\n")
	w("*PLAN*, *PLAN*.md, *PLAN*.readings.json\n: the plan, its review, and what plan read that is not the plan (drop counters, clocks, players), written by plan.\n\n")
	w("*PLAN*.sig\n: its approval, written by approve.\n\n")
	w("/etc/relayctl/allowed_signers\n: when it exists, apply and stage on this machine refuse a plan not signed by a key it lists, unless --skip-approval REASON (recorded in the receipt).\n\n")
	w("*PLAN*.receipts/\n: every run's receipt (apply, resume, stage), each under a name of its own, RUNID-KIND.json and .md; relayctl history lists them.\n\n")
	w("*PLAN*.receipt.json, *PLAN*.receipt.md\n: links to the newest apply's (or resume's) receipt.\n\n")
	w("*PLAN*.ledger.json\n: every host's outcome so far, written by apply as each host starts and ends; apply --resume reads it.\n\n")
	w("*PLAN*.stage.json, *PLAN*.stage.md\n: links to the newest receipt of relayctl stage (or apply --stage-only).\n\n")
	w("~/.ssh/known_hosts, ~/.ssh/config\n: host keys and aliases, as OpenSSH reads them.\n\n")
	w("/var/lib/relayctl\n: on each host: the lock, the journal of an apply, staged files and the newest 100 runs' receipts.\n\n")
	w("# SEE ALSO\n\n**ssh**(1), **ssh-keygen**(1), **sysctl.d**(5), **ss**(8)\n")
	return b.String()
}

// manText is plain text as Markdown: characters that start Markdown
// syntax are escaped, lines joined.
func manText(s string) string {
	var b strings.Builder
	for _, r := range strings.Join(strings.Fields(s), " ") {
		if strings.ContainsRune("\\`*_[]<>|#", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// roffASCII writes every non-ASCII character as a groff escape (\[u2192]
// for →), so the page reads the same whatever encoding man assumes.
func roffASCII(roff []byte) []byte {
	var b strings.Builder
	for _, r := range string(roff) {
		if r < 0x80 {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "\\[u%04X]", r)
		}
	}
	return []byte(b.String())
}

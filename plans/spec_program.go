package plans

import (
	"path"
	"strings"
)

// An inventory program is a list of words run without a shell: what runs
// is a program, and what it reads are files, both checked on the machine
// before it runs (internal/invprogram). A shell given -c, or an
// interpreter given code as an argument, would make one of those words
// code after all, hidden in the spec where the checks see a string. So
// the spec refuses the usual forms of it, behind the usual wrappers
// (env, nice, nohup, setsid, timeout, busybox); the code goes in a script
// beside the spec instead. No list can know every program that runs a
// string: that the machine must allow a program at all is the boundary,
// and this keeps the spec's words what they look like.

// codeOptions is how an interpreter is given code in an argument.
type codeOptions struct {
	short     string   // option letters, alone or in a cluster (-ec), that take code
	long      []string // long options that take code (--eval, or --eval=CODE)
	valued    string   // option letters whose value is the next word, skipped
	operand   bool     // its first operand is code unless a -f names a file (awk)
	foldCase  bool     // options are single-dash words, any case (PowerShell)
	subEval   string   // a first word that evaluates the next (deno eval)
	subApplet bool     // its first word is the program that runs (busybox)
}

var (
	shellCode  = codeOptions{short: "c", long: []string{"--command"}, valued: "oO"}
	codeByName = map[string]codeOptions{
		"sh": shellCode, "bash": shellCode, "dash": shellCode, "zsh": shellCode, "ksh": shellCode, "mksh": shellCode,
		"ash": shellCode, "yash": shellCode, "posh": shellCode, "fish": shellCode, "csh": shellCode, "tcsh": shellCode,
		"python": {short: "c", valued: "WXm"}, "pypy": {short: "c", valued: "WXm"},
		"perl": {short: "eE", valued: "IMm"}, "ruby": {short: "e", valued: "IrC"},
		"node": {short: "ep", long: []string{"--eval", "--print"}, valued: "r"}, "nodejs": {short: "ep", long: []string{"--eval", "--print"}, valued: "r"},
		"php": {short: "rBRE", valued: "cdz"}, "lua": {short: "e", valued: "l"}, "luajit": {short: "e", valued: "lj"},
		"julia": {short: "eE"}, "Rscript": {short: "e"}, "osascript": {short: "e"},
		"awk": {operand: true, valued: "fvF"}, "gawk": {operand: true, valued: "fvFe"}, "mawk": {operand: true, valued: "fvF"}, "nawk": {operand: true, valued: "fvF"},
		"pwsh": {foldCase: true}, "powershell": {foldCase: true},
		"deno": {subEval: "eval"}, "busybox": {subApplet: true},
	}
	// wrappers run the rest of their words as a program; their options
	// that take a value, skipped.
	wrappers = map[string]string{"env": "uCS", "nice": "n", "nohup": "", "setsid": "", "timeout": "sk"}
)

// InlineCode says why argv runs code written in its own words, "" when it
// does not.
func InlineCode(argv []string) string {
	argv, why := unwrapped(argv)
	if why != "" || len(argv) == 0 {
		return why
	}
	o, ok := codeByName[interpreterName(argv[0])]
	name := path.Base(argv[0]) // as the spec writes it
	switch {
	case !ok:
		return ""
	case o.subApplet:
		return InlineCode(argv[1:])
	case o.subEval != "":
		if len(argv) > 1 && argv[1] == o.subEval {
			return name + " " + o.subEval + " runs its argument as code"
		}
		return ""
	case o.foldCase:
		return powershellCode(name, argv[1:])
	}
	return optionCode(name, o, argv[1:])
}

// unwrapped is argv without the wrappers in front of the program they run
// (env's NAME=VALUE words and their options with them), or why the
// wrapper itself reads a string as code: env -S splits one into words as
// a shell would.
func unwrapped(argv []string) ([]string, string) {
	for len(argv) > 0 {
		valued, ok := wrappers[path.Base(argv[0])]
		if !ok {
			return argv, ""
		}
		name := path.Base(argv[0])
		argv = argv[1:]
		for len(argv) > 0 && (strings.HasPrefix(argv[0], "-") || name == "env" && strings.Contains(argv[0], "=")) {
			w := argv[0]
			if name == "env" && (strings.HasPrefix(w, "-S") || strings.HasPrefix(w, "--split-string")) {
				return nil, "env " + w + " splits a string into a command as a shell does"
			}
			argv = argv[1:]
			if len(w) == 2 && strings.ContainsRune(valued, rune(w[1])) && len(argv) > 0 {
				argv = argv[1:]
			}
			if w == "--" {
				break
			}
		}
		if name == "timeout" && len(argv) > 0 {
			argv = argv[1:] // its duration
		}
	}
	return argv, ""
}

// interpreterName is a program's name without its folder and version:
// /usr/bin/python3.11 is python, ksh93 is ksh.
func interpreterName(prog string) string {
	n := path.Base(prog)
	if _, ok := codeByName[n]; ok {
		return n
	}
	return strings.TrimRight(n, "0123456789.")
}

// optionCode finds a code option among the options before the first
// operand (later words are the script's own arguments).
func optionCode(name string, o codeOptions, args []string) string {
	fileGiven := false
	for i := 0; i < len(args); i++ {
		w := args[i]
		switch {
		case w == "--" && o.operand && !fileGiven && i+1 < len(args):
			return name + " runs its first operand, " + args[i+1] + ", as code"
		case w == "--" || !strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "+") || w == "-":
			if o.operand && !fileGiven && w != "--" {
				return name + " runs its first operand, " + w + ", as code"
			}
			return ""
		case strings.HasPrefix(w, "--"):
			opt, _, _ := strings.Cut(w, "=")
			for _, l := range o.long {
				if opt == l {
					return name + " " + opt + " runs its argument as code"
				}
			}
			fileGiven = fileGiven || opt == "--file"
		default:
			letters := w[1:]
			if i := strings.IndexAny(letters, o.short); i >= 0 && w[0] == '-' {
				return name + " -" + letters[i:i+1] + " runs its argument as code"
			}
			fileGiven = fileGiven || strings.ContainsRune(letters, 'f')
			if strings.ContainsAny(letters[len(letters)-1:], o.valued) {
				i++ // the option's value
			}
		}
	}
	return ""
}

// powershellCode finds PowerShell's -Command or -EncodedCommand, in any
// case or short form.
func powershellCode(name string, args []string) string {
	for _, w := range args {
		opt, _, _ := strings.Cut(strings.ToLower(w), ":")
		switch opt {
		case "-c", "-command", "-e", "-ec", "-enc", "-encodedcommand", "-commandwithargs", "-cwa":
			return name + " " + w + " runs its argument as code"
		}
	}
	return ""
}

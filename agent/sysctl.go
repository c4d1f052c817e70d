package agent

import (
	"os"
	"strings"
)

var sysctlPrimitives = map[string]handler{"sysctl": pSysctl}

// pSysctl: KEY VALUE [WANT], /proc/sys/KEY written; VAL what reads back,
// ERR if that is not WANT. A sysctl program's exit status proves nothing
// (docs/kernel.md): the agent writes /proc/sys itself and compares what
// reads back, and a value the kernel refuses is said in its own words.
func pSysctl(s *session, r *request) answer {
	key, value, want := r.arg(0), r.arg(1), r.arg(2)
	f, ok := procSysPath(key)
	if !ok {
		return errf("%s is not a sysctl key", key)
	}
	if _, err := os.Stat(f); err != nil {
		return errf("%s does not exist", key)
	}
	if err := writeProc(f, value+"\n"); err != nil {
		return errf("the kernel refused %s = %s (%s); it reads %s", key, value, errText(err), readProc(f, 200))
	}
	got := readProc(f, 4096)
	if len(r.args) > 2 && squeeze(got) != squeeze(want) {
		return errf("%s: read back %s, want %s", key, squeeze(got), want)
	}
	return val(got)
}

// procSysPath is the file under /proc/sys that holds key: dots become
// slashes, and nothing can walk out of /proc/sys.
func procSysPath(key string) (string, bool) {
	segs := strings.Split(key, ".")
	if len(segs) < 2 {
		return "", false
	}
	for _, seg := range segs {
		if seg == "" || seg == ".." || strings.ContainsAny(seg, "/\x00") {
			return "", false
		}
	}
	return "/proc/sys/" + strings.Join(segs, "/"), true
}

// writeProc writes a /proc file in one write: the kernel parses what one
// write gives it.
func writeProc(f, v string) error {
	w, err := os.OpenFile(f, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = w.Write([]byte(v))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// readProc reads a /proc file whole in one read from offset 0, at most n
// bytes: an integer sysctl read in pieces gives only its first (the
// kernel formats it for a read at offset 0).
func readProc(f string, n int) string {
	fd, err := os.Open(f)
	if err != nil {
		return ""
	}
	defer fd.Close()
	b := make([]byte, n)
	m, _ := fd.Read(b)
	return trimNewline(string(b[:m]))
}

// squeeze is text's words joined by single spaces (tune.Normalize).
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

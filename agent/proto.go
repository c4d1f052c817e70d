package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The wire between relayctl and the agent, one request a line:
//
//	KIND \t JOURNAL \t NDATA \t NARGV \t ARG ...
//
// then NDATA bytes of data and NARGV lines, each one word of a command.
// JOURNAL is 1 when the journal notes the primitive once done (it changes
// the host) and the primitive fails if it cannot, 2 for an undo (noted if
// it can be), 0 otherwise. Each request is answered with one line:
//
//	OK | VAL text | ERR text | DATA n, then n bytes | NEED [why] | SKIP
//
// relayctl writes a batch at once, ended by "sync", and reads the answers
// after it: after an ERR or a NEED nothing more of the batch is done (every
// request up to the sync answers SKIP), and the sync answers OK.

// request is one request line, with what is left of its payload.
type request struct {
	kind     string
	journal  int
	dataLeft int
	argvLeft int
	args     []string
	in       *bufio.Reader
}

// maxRequestLine bounds a request line: its fields are bounded by relayctl
// (4096 bytes each) and a primitive has a handful.
const maxRequestLine = 64 << 10

// errBadRequest is a request line whose sizes are not numbers: the stream
// cannot be kept in step, and the agent stops.
var errBadRequest = errors.New("bad request line")

// readRequest reads the next request line; io.EOF when relayctl is done.
func readRequest(in *bufio.Reader) (*request, error) {
	line, err := readLine(in, maxRequestLine)
	if err != nil {
		return nil, err
	}
	f := strings.Split(line, "\t")
	for len(f) < 4 {
		f = append(f, "")
	}
	r := &request{kind: f[0], args: f[4:], in: in}
	r.journal, _ = strconv.Atoi(f[1])
	var e1, e2 error
	r.dataLeft, e1 = strconv.Atoi(f[2])
	r.argvLeft, e2 = strconv.Atoi(f[3])
	if e1 != nil || e2 != nil || r.dataLeft < 0 || r.argvLeft < 0 || !digits(f[2]) || !digits(f[3]) {
		return nil, errBadRequest
	}
	return r, nil
}

// readLine reads one line without its newline, at most max bytes; a last
// line without a newline counts.
func readLine(in *bufio.Reader, max int) (string, error) {
	var b []byte
	for {
		chunk, err := in.ReadSlice('\n')
		b = append(b, chunk...)
		if len(b) > max {
			return "", fmt.Errorf("a line longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return string(b[:len(b)-1]), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(b) > 0:
			return string(b), nil
		default:
			return "", err
		}
	}
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// arg is the request's i-th argument, "" when it has none.
func (r *request) arg(i int) string {
	if i < len(r.args) {
		return r.args[i]
	}
	return ""
}

// data reads the request's data whole, at most max bytes (more is an
// error, and is then read and dropped so the stream stays in step).
func (r *request) data(max int) ([]byte, error) {
	n := r.dataLeft
	r.dataLeft = 0
	if n > max {
		io.CopyN(io.Discard, r.in, int64(n))
		return nil, fmt.Errorf("%d bytes of data, more than the %d this takes", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.in, b); err != nil {
		return nil, err
	}
	return b, nil
}

// dataReader streams the request's data: exactly what is left of it.
// Whatever its reader does (stops at a bad byte, a full disk), drain
// reads the rest after the primitive, so the next line read is the next
// request.
func (r *request) dataReader() io.Reader { return &countedReader{req: r} }

// countedReader is a payload read through: it counts the request's
// dataLeft down as it reads, and reads no further.
type countedReader struct{ req *request }

func (c *countedReader) Read(p []byte) (int, error) {
	left := c.req.dataLeft
	if left <= 0 {
		return 0, io.EOF
	}
	if len(p) > left {
		p = p[:left]
	}
	n, err := c.req.in.Read(p)
	c.req.dataLeft -= n
	if err == io.EOF && c.req.dataLeft > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// argv reads n of the request's word lines (fewer if it has fewer: then
// ok is false). Words are read whatever they hold; an empty one is
// returned as such, and a command with one is refused by its caller.
func (r *request) argv(n int) (words []string, ok bool) {
	for ; n > 0 && r.argvLeft > 0; n-- {
		w, err := readLine(r.in, maxRequestLine)
		if err != nil {
			return words, false
		}
		r.argvLeft--
		words = append(words, w)
	}
	return words, n == 0
}

// drain reads and drops what the primitive left of its payload.
func (r *request) drain() error {
	if r.dataLeft > 0 {
		if _, err := io.CopyN(io.Discard, r.in, int64(r.dataLeft)); err != nil {
			return err
		}
		r.dataLeft = 0
	}
	for r.argvLeft > 0 {
		if _, err := readLine(r.in, maxRequestLine); err != nil {
			return err
		}
		r.argvLeft--
	}
	return nil
}

// answer is a primitive's answer.
type answer struct {
	word string // OK, VAL, ERR, DATA, NEED, SKIP; "" when the primitive wrote its own
	text string // VAL's, ERR's, NEED's
	data []byte // DATA's
}

func ok() answer                     { return answer{word: "OK"} }
func val(s string) answer            { return answer{word: "VAL", text: s} }
func errf(f string, a ...any) answer { return answer{word: "ERR", text: fmt.Sprintf(f, a...)} }
func need(why string) answer         { return answer{word: "NEED", text: why} }
func dataAnswer(b []byte) answer     { return answer{word: "DATA", data: b} }

// written is the answer of a primitive that wrote its own (detach,
// verdict: theirs and the window's answers).
func written() answer { return answer{} }

// stops says the batch stops here: nothing after it is done until the sync.
func (a answer) stops() bool { return a.word == "ERR" || a.word == "NEED" }

// done says the primitive did what it was asked.
func (a answer) done() bool { return a.word == "OK" || a.word == "VAL" || a.word == "DATA" }

// bytes is the answer as it goes on the wire.
func (a answer) bytes() []byte {
	switch a.word {
	case "":
		return nil
	case "DATA":
		return append([]byte("DATA "+strconv.Itoa(len(a.data))+"\n"), a.data...)
	case "VAL", "ERR", "UNSAFE":
		return []byte(a.word + " " + clean(a.text) + "\n")
	case "NEED":
		if a.text == "" {
			return []byte("NEED\n")
		}
		return []byte("NEED " + clean(a.text) + "\n")
	}
	return []byte(a.word + "\n")
}

// clean is text made one line of at most 2000 bytes: tabs, newlines and
// carriage returns become spaces, other control characters go.
func clean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 2000; i++ {
		switch c := s[i]; {
		case c == '\n' || c == '\t' || c == '\r':
			b.WriteByte(' ')
		case c < 32 || c == 127:
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// req is one request line, its data and its words, as relayctl writes
// it: the agent makes one to read the host as relayctl asks (read-back).
func req(kind string, journal int, data []byte, argv []string, args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\t%d\t%d\t%d", kind, journal, len(data), len(argv))
	for _, a := range args {
		b.WriteString("\t" + a)
	}
	b.WriteString("\n")
	b.Write(data)
	for _, w := range argv {
		b.WriteString(w + "\n")
	}
	return b.String()
}

// bufioReader reads a request made here.
func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

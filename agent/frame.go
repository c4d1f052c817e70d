package agent

import (
	"bytes"
	"strconv"
	"strings"
)

// framer writes output as observe.sh framed it, section by section:
//
//	BOUNDARY NAME\n  data  \nBOUNDARY end STATUS\n
//
// relayctl parses it (rollout/shellhost ParseFrames): the data of a
// section is what lies between the header line and "\nBOUNDARY end", so a
// command's output is framed as it is, and a value without its newline.
// The boundary is relayctl's secret for this run: it never appears on a
// command line, and relayctl refuses a section whose data holds it.
type framer struct {
	boundary string
	out      bytes.Buffer
}

// section frames data under name with the status of what made it.
func (f *framer) section(name string, status int, data []byte) {
	f.out.WriteString(f.boundary + " " + name + "\n")
	f.out.Write(data)
	f.out.WriteString("\n" + f.boundary + " end " + strconv.Itoa(status) + "\n")
}

// value frames a text the agent says itself (observe.sh's value).
func (f *framer) value(name string, status int, text string) {
	f.section(name, status, []byte(text))
}

// line frames one line of output, as a command that printed it would.
func (f *framer) line(name, text string) { f.section(name, 0, []byte(text+"\n")) }

// absent frames observe.sh's "absent": nothing there to read (status 2).
func (f *framer) absent(name string) { f.section(name, 2, []byte("absent\n")) }

// read frames what a read gave: its bytes, status 0; or nothing, status 1
// (observe.sh's head or cat, whose complaint went to /dev/null).
func (f *framer) read(name string, data []byte, err error) {
	if err != nil {
		f.section(name, 1, nil)
		return
	}
	f.section(name, 0, data)
}

// boundaryPrefix starts every frame boundary relayctl makes.
const boundaryPrefix = "@@relayctl-"

// validBoundary: b is a boundary relayctl could have made (its prefix, then
// letters, digits, - or _), never a blank or short one that host output
// could hold by chance.
func validBoundary(b string) bool {
	rest, ok := strings.CutPrefix(b, boundaryPrefix)
	if !ok || len(rest) < 8 || len(rest) > 128 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

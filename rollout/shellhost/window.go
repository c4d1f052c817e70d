package shellhost

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/rollout"
)

// enclosing is a request whose data holds the requests after it in its
// batch (rollout.Op.Encloses): a detach's, whose data is the window's
// program (package agent, window.go), or a verdict undo's, whose
// data is the rollback's requests. The words end with the data's sha256
// and how many requests it holds: the agent checks the one and answers the
// other.
type enclosing struct {
	args []string
	data []byte
}

// enclosings are the enclosing requests of a batch, by index (at most one:
// it holds the rest of the batch).
func (h *Host) enclosings(batch []rollout.Op, calls map[int]framed) (map[int]enclosing, error) {
	for i, o := range batch {
		if !o.Encloses() {
			continue
		}
		sub := batch[i+1 : rollout.Enclosed(batch, i)]
		reqs, err := requests(sub, shifted(calls, i+1))
		if err != nil {
			return nil, err
		}
		data := reqs
		if o.Kind == "detach" {
			if data, err = h.program(o.Window, reqs); err != nil {
				return nil, err
			}
		}
		sum := sha256.Sum256(data)
		args := append(append([]string(nil), o.Args...), hex.EncodeToString(sum[:]), strconv.Itoa(len(sub)))
		return map[int]enclosing{i: {args: args, data: data}}, nil
	}
	return nil, nil
}

// program is a window's program: its settings, the host's own checks and
// read-back, the rollbacks it may run by itself, and the window's requests.
func (h *Host) program(w *rollout.Window, window []byte) ([]byte, error) {
	var b bytes.Buffer
	kind := "window"
	if w.Rollback {
		kind = "rollback"
	}
	fmt.Fprintf(&b, "relayctl-window 1\nkind %s\nawait %d\njudge %d\nstable %d\n", kind, w.Await.Milliseconds(), w.Judge.Milliseconds(), w.Stable.Milliseconds())
	var checks strings.Builder
	for _, c := range w.Checks {
		checks.WriteString(c.Kind + "\t" + strings.Join(c.Args, "\t") + "\n")
	}
	section(&b, "checks", []byte(checks.String()))
	var observe []byte
	if w.Observe != nil {
		c, err := newObserveCall(*w.Observe, h.name, h.conn.Address(), h.conn.User())
		if err != nil {
			return nil, err
		}
		if observe, err = requests([]rollout.Op{{Kind: "observe", Query: w.Observe}}, map[int]framed{0: c}); err != nil {
			return nil, err
		}
	}
	section(&b, "observe", observe)
	b.WriteString("undo-at")
	for _, i := range w.UndoAt {
		b.WriteString(" " + strconv.Itoa(i))
	}
	b.WriteByte('\n')
	for _, u := range w.Undo {
		reqs, err := requests(u, nil)
		if err != nil {
			return nil, err
		}
		section(&b, "undo", reqs)
	}
	section(&b, "window", window)
	return b.Bytes(), nil
}

// section writes a program's part: its name and size, then its bytes.
func section(b *bytes.Buffer, name string, data []byte) {
	fmt.Fprintf(b, "%s %d\n", name, len(data))
	b.Write(data)
}

// requests are ops as the agent reads requests, with their data (a
// window has nobody to ask for bytes) and no sync.
func requests(ops []rollout.Op, calls map[int]framed) ([]byte, error) {
	var b bytes.Buffer
	if err := writeBatch(&b, ops, payloads(ops, calls, true, map[int]*keepState{}, 0), nil, false); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// shifted are calls of a batch renumbered from from: those of the part of
// the batch that starts there.
func shifted(calls map[int]framed, from int) map[int]framed {
	out := map[int]framed{}
	for i, c := range calls {
		if i >= from {
			out[i-from] = c
		}
	}
	return out
}

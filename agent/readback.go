package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
)

// The host's own read-back, inside a window: the window reads the host as
// relayctl would (its observe, parsed by the parser relayctl uses) and
// judges the readings by the plan's own checks (rollout.ReadBack.Judge,
// the function relayctl's read-back runs), held for the plan's stable
// time. When it holds, the session behind the window takes relayctl's
// keep, prunes, files the receipt (completed with this read-back) and
// unlocks in the same batch; when it does not, the window refuses the keep
// and waits for relayctl's word (an undo), or rolls back by itself.
var readBackPrimitives = map[string]handler{
	"read-back": pReadBack,
	"reopen":    pReopen,
}

// maxReadBackRequest bounds a read-back's data: the plan of one host, the
// host as read before the window, the query.
const maxReadBackRequest = 8 << 20

// pReadBack: BOUNDARY, with the read-back and its query as data: DATA,
// the verdict and the reading it ended on, framed with BOUNDARY.
func pReadBack(s *session, r *request) answer {
	if !s.inWindow {
		return errf("read-back is a window's: it runs after the window's ops")
	}
	b, err := r.data(maxReadBackRequest)
	if err != nil {
		return errf("read-back: %v", err)
	}
	var req rollout.ReadBackRequest
	if err := json.Unmarshal(b, &req); err != nil || req.ReadBack.Plan == nil || req.ReadBack.Host == nil {
		return errf("read-back: a request that does not decode")
	}
	boundary := r.arg(0)
	if !validBoundary(boundary) {
		return errf("read-back: bad frame boundary")
	}
	frames := map[*plans.Facts][]byte{}
	res, err := req.ReadBack.Judge(nil, func() (*plans.Facts, error) {
		out, f, err := readSelf(s, boundary, req.Query)
		if err == nil {
			frames[f] = out
		}
		return f, err
	})
	if err != nil {
		return errf("read-back: %v", err)
	}
	s.readBack = &rollout.HostReadBack{Result: res, Keys: req.ReadBack.Plan.ReadKeys()}
	a, err := json.Marshal(rollout.ReadBackAnswer{Held: res.Held, Why: res.Why, Frames: frames[res.After]})
	if err != nil {
		return errf("read-back: %v", err)
	}
	return dataAnswer(a)
}

// readSelf reads the host as relayctl's observe does, and its facts as
// relayctl makes them of the answer.
func readSelf(s *session, boundary string, q rollout.Query) ([]byte, *plans.Facts, error) {
	words, err := hostfacts.Args(q)
	if err != nil {
		return nil, nil, err
	}
	in := req("observe", 0, nil, words, boundary)
	r, err := readRequest(bufioReader(in))
	if err != nil {
		return nil, nil, err
	}
	a := observe(s, r)
	if a.word != "DATA" {
		return nil, nil, errors.New(a.text)
	}
	fr, err := hostfacts.ParseFrames(a.data, boundary)
	if err != nil {
		return nil, nil, err
	}
	f, err := hostfacts.FactsFromFrames(fr, q)
	if err != nil {
		return nil, nil, err
	}
	return a.data, f, nil
}

// pReopen: NAME, the receipt this run filed in its window's batch taken
// back (relayctl's own check of the host's read-back did not hold): the
// run's journal the journal again, and the window's backups the stage, so
// the window can be rolled back.
func pReopen(s *session, r *request) answer {
	name := r.arg(0)
	if !plainName(name) {
		return errf("bad receipt name")
	}
	base := s.state + "/receipts/" + name
	if _, err := os.Lstat(base + ".json"); err != nil {
		return errf("no receipt %s to reopen", name)
	}
	if exists(s.journal) || exists(s.stage) {
		return errf("reopen %s: a journal or a stage is there already", name)
	}
	if err := os.Rename(base+".journal", s.journal); err != nil {
		return errf("reopen %s: the journal: %s", name, errText(err))
	}
	if isDir(base + ".backups") {
		if err := os.Rename(base+".backups", s.stage); err != nil {
			return errf("reopen %s: the backups: %s", name, errText(err))
		}
	} else if err := os.Mkdir(s.stage, 0o700); err != nil {
		return errf("reopen %s: %s", name, errText(err))
	}
	if err := os.Remove(base + ".json"); err != nil {
		return errf("reopen %s: %s", name, errText(err))
	}
	return ok()
}

// completeReceipt is a commit's receipt completed with the window's own
// read-back, when the commit asks (read-back, its fourth word).
func completeReceipt(s *session, r *request, body []byte) ([]byte, error) {
	if r.arg(3) != "read-back" {
		return body, nil
	}
	if s.win == nil || s.win.readBack == nil {
		return nil, fmt.Errorf("no read-back of the window to complete the receipt with")
	}
	return rollout.CompleteHostReceipt(body, *s.win.readBack)
}

package rollout

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Sentinel errors of the host lock.
var (
	ErrLocked    = errors.New("another apply holds the host lock")
	ErrStaleLock = errors.New("a dead apply left the host lock behind")
)

// hostLock is held by one long-lived remote command (flock on
// STATE/lock, released by the kernel when the command ends), so a run that
// dies cannot keep the host locked, and its owner file stays behind for the
// next run to report.
type hostLock struct {
	in   *io.PipeWriter
	done chan error
}

func takeLock(ctx context.Context, r Runner, state, owner string, breakLock bool) (*hostLock, error) {
	owner = strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, owner)
	mode := ""
	if breakLock {
		mode = "break"
	}
	cmd := Command("sh", "-c", applyScript, "relayctl", "lock", state, owner, mode)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	l := &hostLock{in: inW, done: make(chan error, 1)}
	lctx := WithoutCommandTimeout(context.WithoutCancel(ctx))
	go func() {
		err := r.Run(lctx, cmd, inR, outW, &stderr)
		outW.CloseWithError(err)
		inR.Close()
		l.done <- err
	}()
	sc := bufio.NewScanner(outR)
	if !sc.Scan() {
		inW.Close()
		err := <-l.done
		return nil, fmt.Errorf("take host lock: %v %s", err, strings.TrimSpace(stderr.String()))
	}
	first := sc.Text()
	if first == "LOCKED" {
		go io.Copy(io.Discard, outR)
		return l, nil
	}
	var rest []string
	journal := ""
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "JOURNAL "); ok {
			journal = j
			continue
		}
		rest = append(rest, sc.Text())
	}
	inW.Close()
	<-l.done
	who := strings.Join(rest, " ")
	if who == "" {
		who = "an unknown owner"
	}
	switch first {
	case "BUSY":
		return nil, fmt.Errorf("%w: %s (%s/lock)", ErrLocked, who, state)
	case "STALE":
		if journal != "" {
			return nil, fmt.Errorf("%w: %s; its journal (%s/journal) ends with: %s; check the host (relayctl verify PLAN), then apply with --clear-journal", ErrStaleLock, who, state, journal)
		}
		return nil, fmt.Errorf("%w: %s; check the host (relayctl verify PLAN), then apply with --break-lock", ErrStaleLock, who)
	}
	return nil, fmt.Errorf("take host lock: unexpected answer %q", first)
}

// release ends the lock command cleanly, which removes the owner file.
func (l *hostLock) release() {
	l.in.Write([]byte("release\n"))
	l.in.Close()
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
	}
}

package cookie

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/relayctl/relayctl/relay/wire"
)

var (
	t0     = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	player = netip.MustParseAddrPort("198.51.100.7:40000")
)

func newJar(t *testing.T) *Jar {
	t.Helper()
	j, err := New(rand.Reader, t0)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func issue(t *testing.T, j *Jar, addr netip.AddrPort, at time.Time) wire.Cookie {
	t.Helper()
	c, err := j.Issue(addr, at)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheck(t *testing.T) {
	at := t0.Add(3 * time.Second)
	flip := func(i int) func(*wire.Cookie) { return func(c *wire.Cookie) { c[i] ^= 1 } }
	tests := []struct {
		name   string
		change func(*wire.Cookie)
		addr   netip.AddrPort
		later  time.Duration // checked this long after it was issued
		want   error
	}{
		{name: "at once", addr: player},
		{name: "just before it expires", addr: player, later: Lifetime - 1},
		{name: "expired", addr: player, later: Lifetime, want: ErrExpired},
		{name: "long expired", addr: player, later: time.Hour, want: ErrExpired},
		{name: "another address", addr: netip.MustParseAddrPort("198.51.100.8:40000"), want: ErrForged},
		{name: "another port", addr: netip.MustParseAddrPort("198.51.100.7:40001"), want: ErrForged},
		{name: "MAC tampered with", change: flip(20), addr: player, want: ErrForged},
		{name: "issued time tampered with", change: flip(7), addr: player, later: time.Second, want: ErrForged},
		{name: "none", change: func(c *wire.Cookie) { *c = wire.Cookie{} }, addr: player, want: ErrForged},
		{name: "from the future", addr: player, later: -time.Second, want: ErrForged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newJar(t)
			c := issue(t, j, player, at)
			if tt.change != nil {
				tt.change(&c)
			}
			if err := j.Check(c, tt.addr, at.Add(tt.later)); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestAnotherProcess: a relay process (a new one after a restart or a
// handoff) never accepts another's cookies.
func TestAnotherProcess(t *testing.T) {
	a, b := newJar(t), newJar(t)
	c := issue(t, a, player, t0.Add(time.Second))
	if err := b.Check(c, player, t0.Add(time.Second)); !errors.Is(err, ErrForged) {
		t.Errorf("got %v, want %v", err, ErrForged)
	}
}

// TestRotation: the secret changes every Lifetime, and a cookie issued just
// before a change is still good after it, under the previous secret, until
// it is Lifetime old; then the previous secret is gone too.
func TestRotation(t *testing.T) {
	j := newJar(t)
	before := t0.Add(Lifetime - time.Millisecond)
	c := issue(t, j, player, before)
	k0 := j.key
	after := t0.Add(Lifetime + time.Millisecond)
	if err := j.Check(c, player, after); err != nil {
		t.Fatalf("just after the secret changed: got %v, want nil", err)
	}
	if j.key == k0 || j.prevKey != k0 {
		t.Fatalf("the secret did not rotate at Lifetime")
	}
	// A cookie of the new period uses the new secret.
	d := issue(t, j, player, after)
	if bytes.Equal(c[8:], d[8:]) {
		t.Fatalf("two periods made the same MAC")
	}
	if err := j.Check(c, player, before.Add(Lifetime)); !errors.Is(err, ErrExpired) {
		t.Errorf("Lifetime after it was issued: got %v, want %v", err, ErrExpired)
	}
	// Two periods on, the first secret is gone: even a forged "fresh" time
	// in that period cannot be checked and is expired.
	if err := j.Check(c, player, t0.Add(2*Lifetime+time.Millisecond)); !errors.Is(err, ErrExpired) {
		t.Errorf("two periods on: got %v, want %v", err, ErrExpired)
	}
	if err := j.Check(d, player, t0.Add(2*Lifetime+time.Millisecond/2)); err != nil {
		t.Errorf("the previous period's cookie, in time: got %v, want nil", err)
	}
}

// TestRotationAfterSilence: a relay that issued nothing for several periods
// has no previous secret, so nothing from before the silence passes.
func TestRotationAfterSilence(t *testing.T) {
	j := newJar(t)
	c := issue(t, j, player, t0.Add(time.Second))
	late := t0.Add(5*Lifetime + time.Second)
	if err := j.Check(c, player, late); !errors.Is(err, ErrExpired) {
		t.Errorf("got %v, want %v", err, ErrExpired)
	}
	if j.prevKey != nil {
		t.Errorf("a previous secret survived a silence of several periods")
	}
	if err := j.Check(issue(t, j, player, late), player, late); err != nil {
		t.Errorf("a fresh cookie after the silence: got %v, want nil", err)
	}
}

func TestNeverZero(t *testing.T) {
	j := newJar(t)
	if c := issue(t, j, player, t0); c == (wire.Cookie{}) {
		t.Errorf("a cookie issued at the jar's start is all zero, which means none")
	}
	if err := j.Check(issue(t, j, player, t0), player, t0); err != nil {
		t.Errorf("a cookie issued at the jar's start: got %v, want nil", err)
	}
}

func TestRandomFails(t *testing.T) {
	if _, err := New(io.LimitReader(rand.Reader, 8), t0); err == nil {
		t.Errorf("New with a random source that runs dry: got nil error")
	}
	j, err := New(io.LimitReader(rand.Reader, 16), t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Issue(player, t0.Add(Lifetime)); err == nil {
		t.Errorf("Issue when the secret is due and the random source is dry: got nil error")
	}
}

func TestNoAlloc(t *testing.T) {
	j := newJar(t)
	at := t0.Add(time.Second)
	allocs := testing.AllocsPerRun(100, func() {
		c, _ := j.Issue(player, at)
		if err := j.Check(c, player, at); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per issue and check, want 0", allocs)
	}
}

func BenchmarkIssueCheck(b *testing.B) {
	j, err := New(rand.Reader, t0)
	if err != nil {
		b.Fatal(err)
	}
	at := t0.Add(time.Second)
	for b.Loop() {
		c, _ := j.Issue(player, at)
		if j.Check(c, player, at) != nil {
			b.Fatal("check failed")
		}
	}
}

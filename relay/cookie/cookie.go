// Package cookie makes and checks relayd's return-routability cookies: the
// stateless proof, in the join handshake (relay/wire), that a player's
// address receives what the relay sends there.
//
// A cookie is the time it was issued and a MAC of that time, the player's
// IPv4 address and UDP port under a secret of the relay process. Only a
// party that received the challenge sent to that address and port can echo
// it, so the relay keeps no state for an address until it has proven
// itself. The secret is random, held in memory only, and replaced every
// Lifetime; a cookie is valid for Lifetime after it was issued, under the
// secret of its period or of the one before.
//
// The MAC is one AES-128 block: its input (issued time, address, port and
// the wire version) is exactly 16 bytes, and a block cipher is a
// pseudo-random function on a fixed-length single block, which is all a MAC
// of fixed-length input needs. It costs tens of nanoseconds and allocates
// nothing, so answering a flood of joins costs the relay little.
//
// It is pure: the caller passes the time. A Jar is not safe for concurrent
// use.
package cookie

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/relayctl/relayctl/relay/wire"
)

// Lifetime is how long a cookie is valid after it was issued, and how often
// the secret is replaced. A handshake takes one round trip; ten seconds is
// room for a slow path and a few retries.
const Lifetime = 10 * time.Second

var (
	ErrExpired = errors.New("cookie expired")
	// ErrForged: the MAC does not match: tampered with, made for another
	// address or port, or by another relay process.
	ErrForged = errors.New("cookie not issued to this address by this relay")
)

// Jar issues and checks cookies under its secrets.
type Jar struct {
	rand   io.Reader
	base   time.Time // issued times count from here, on the monotonic clock
	period int64     // the secret's life, Lifetime in nanoseconds

	// The secrets of period cur and of the one before it (nil if that
	// period had none: cookies of it were never issued).
	cur          int64
	key, prevKey cipher.Block

	// Scratch blocks for the MAC: a slice passed to cipher.Block escapes,
	// so blocks on the stack would cost an allocation per cookie.
	in, out [aes.BlockSize]byte
}

// New returns a Jar whose secrets come from rand (crypto/rand.Reader in
// relayd), starting at now.
func New(rand io.Reader, now time.Time) (*Jar, error) {
	j := &Jar{rand: rand, base: now, period: int64(Lifetime)}
	b, err := j.secret()
	if err != nil {
		return nil, err
	}
	j.key = b
	return j, nil
}

func (j *Jar) secret() (cipher.Block, error) {
	var key [16]byte
	if _, err := io.ReadFull(j.rand, key[:]); err != nil {
		return nil, fmt.Errorf("make cookie secret: %w", err)
	}
	return aes.NewCipher(key[:])
}

// rotate moves to the secret period of t (nanoseconds since base).
func (j *Jar) rotate(t int64) error {
	p := t / j.period
	if p <= j.cur {
		return nil
	}
	next, err := j.secret()
	if err != nil {
		return err
	}
	if p == j.cur+1 {
		j.prevKey = j.key
	} else {
		j.prevKey = nil // nothing was issued in the period before p
	}
	j.key, j.cur = next, p
	return nil
}

// since is now as nanoseconds since base, at least 1 so that no cookie is
// all zero (the zero Cookie means "none").
func (j *Jar) since(now time.Time) int64 { return max(int64(now.Sub(j.base)), 1) }

// Issue makes the cookie for addr at now. It fails only if the random
// source does, when its secret is due to be replaced.
func (j *Jar) Issue(addr netip.AddrPort, now time.Time) (wire.Cookie, error) {
	t := j.since(now)
	if err := j.rotate(t); err != nil {
		return wire.Cookie{}, err
	}
	var c wire.Cookie
	binary.BigEndian.PutUint64(c[:8], uint64(t))
	copy(c[8:], j.mac(j.key, t, addr))
	return c, nil
}

// Check reports whether c was issued by this Jar for addr less than
// Lifetime before now.
func (j *Jar) Check(c wire.Cookie, addr netip.AddrPort, now time.Time) error {
	t := j.since(now)
	if err := j.rotate(t); err != nil {
		return err
	}
	issued := int64(binary.BigEndian.Uint64(c[:8]))
	var key cipher.Block
	switch p := issued / j.period; {
	case issued <= 0 || issued > t:
		return ErrForged // never issued: from the future, or before this Jar
	case p == j.cur:
		key = j.key
	case p == j.cur-1 && j.prevKey != nil:
		key = j.prevKey
	default:
		return ErrExpired
	}
	if subtle.ConstantTimeCompare(j.mac(key, issued, addr), c[8:]) != 1 {
		return ErrForged
	}
	if t-issued >= j.period {
		return ErrExpired
	}
	return nil
}

// mac returns the 16-byte MAC of issued, addr and the wire version under
// key, in j's scratch block. relayd's addresses are IPv4: it listens with
// udp4.
func (j *Jar) mac(key cipher.Block, issued int64, addr netip.AddrPort) []byte {
	binary.BigEndian.PutUint64(j.in[0:8], uint64(issued))
	a := addr.Addr().Unmap().As4()
	copy(j.in[8:12], a[:])
	binary.BigEndian.PutUint16(j.in[12:14], addr.Port())
	binary.BigEndian.PutUint16(j.in[14:16], wire.Version)
	key.Encrypt(j.out[:], j.in[:])
	return j.out[:]
}

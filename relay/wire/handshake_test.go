package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestHandshakeBytes pins the handshake layout documented in handshake.go.
func TestHandshakeBytes(t *testing.T) {
	var c Cookie
	for i := range c {
		c[i] = byte(0xa0 + i)
	}
	h := Handshake{Kind: KindChallenge, Reason: ReasonNotJoined, Lobby: 0x01020304, Player: 0x05060708, Cookie: c}
	want := append([]byte{'R', 'L', 'Y', 'C', 0, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8}, c[:]...)
	if got := EncodeHandshake(make([]byte, 64), h); !bytes.Equal(got, want) {
		t.Errorf("got % x, want % x", got, want)
	}
	r := EncodeHandshake(make([]byte, HandshakeLen), Refusal(1, 2, ReasonVersion))
	if !bytes.HasPrefix(r, []byte("RLYR\x00\x02\x00\x09")) || !bytes.Equal(r[16:], []byte("relayd speaks wire v2\x00\x00\x00")) {
		t.Errorf("refusal: got %q", r)
	}
}

func TestDecodeHandshake(t *testing.T) {
	enc := func(h Handshake) []byte { return EncodeHandshake(make([]byte, HandshakeLen), h) }
	var cookie Cookie
	cookie[0] = 1
	join := enc(Handshake{Kind: KindJoin, Lobby: 7, Player: 3, Cookie: cookie})
	v3 := bytes.Clone(join)
	v3[5] = 3
	welcomeWithCookie := enc(Handshake{Kind: KindWelcome, Lobby: 7, Player: 3})
	welcomeWithCookie[20] = 1
	tests := []struct {
		name    string
		in      []byte
		want    Handshake
		wantErr error
	}{
		{name: "join", in: join, want: Handshake{Kind: KindJoin, Version: 2, Lobby: 7, Player: 3, Cookie: cookie}},
		{name: "challenge", in: enc(Handshake{Kind: KindChallenge, Reason: ReasonCookieRejected, Lobby: 1, Player: 1, Cookie: cookie}),
			want: Handshake{Kind: KindChallenge, Version: 2, Reason: ReasonCookieRejected, Lobby: 1, Player: 1, Cookie: cookie}},
		{name: "refused", in: enc(Refusal(4, 5, ReasonLobbyFull)), want: Refusal(4, 5, ReasonLobbyFull)},
		{name: "short", in: join[:HandshakeLen-1], wantErr: ErrHandshakeLen},
		{name: "long", in: append(bytes.Clone(join), 0), wantErr: ErrHandshakeLen},
		{name: "data magic", in: Encode(make([]byte, HandshakeLen), Header{Lobby: 1, Player: 1}), wantErr: ErrNotHandshake},
		{name: "version 3", in: v3, want: Handshake{Kind: KindJoin, Version: 3, Lobby: 7, Player: 3}, wantErr: ErrVersion},
		{name: "join with a reason", in: enc(Handshake{Kind: KindJoin, Reason: ReasonLobbyFull}), wantErr: ErrReason},
		{name: "challenge with a refusal's reason", in: enc(Handshake{Kind: KindChallenge, Reason: ReasonLobbyFull}), wantErr: ErrReason},
		{name: "refused without a reason", in: enc(Handshake{Kind: KindRefused}), wantErr: ErrReason},
		{name: "refused with an unknown reason", in: enc(Handshake{Kind: KindRefused, Reason: numReasons}), wantErr: ErrReason},
		{name: "welcome with a cookie", in: welcomeWithCookie, wantErr: ErrWelcome},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want.Kind == KindRefused {
				tt.want.Version = Version
			}
			got, err := DecodeHandshake(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	for in, want := range map[string]Kind{"": KindUnknown, "RLY": KindUnknown, "RLY1": KindV1, "RLY2xx": KindData,
		"RLYJ": KindJoin, "RLYC": KindChallenge, "RLYW": KindWelcome, "RLYR": KindRefused, "RLYX": KindUnknown} {
		if got := KindOf([]byte(in)); got != want {
			t.Errorf("KindOf(%q): got %d, want %d", in, got, want)
		}
	}
}

func TestHandshakeNoAlloc(t *testing.T) {
	buf := make([]byte, HandshakeLen)
	h := Handshake{Kind: KindJoin, Lobby: 1, Player: 2}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodeHandshake(EncodeHandshake(buf, h)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per encode+decode, want 0", allocs)
	}
}

func FuzzDecodeHandshake(f *testing.F) {
	enc := func(h Handshake) []byte { return EncodeHandshake(make([]byte, HandshakeLen), h) }
	f.Add([]byte{})
	f.Add([]byte("RLYJ"))
	f.Add(enc(Handshake{Kind: KindJoin, Lobby: 1, Player: 1}))
	f.Add(enc(Handshake{Kind: KindChallenge, Reason: ReasonNotJoined, Lobby: 4095, Player: 8, Cookie: Cookie{1, 2, 3}}))
	f.Add(enc(Handshake{Kind: KindWelcome, Lobby: 2, Player: 2}))
	f.Add(enc(Refusal(3, 3, ReasonSourceLimit)))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		h, err := DecodeHandshake(b)
		if !bytes.Equal(in, b) {
			t.Fatalf("DecodeHandshake modified its input")
		}
		if errors.Is(err, ErrVersion) {
			if h.Version == Version || h.Kind < KindJoin {
				t.Fatalf("ErrVersion with version %d kind %d", h.Version, h.Kind)
			}
			return
		}
		if err != nil {
			if h != (Handshake{}) {
				t.Fatalf("got %+v with error %v, want the zero Handshake", h, err)
			}
			return
		}
		if len(b) != HandshakeLen || h.Version != Version || !reasonFits(h.Kind, h.Reason) {
			t.Fatalf("accepted %+v from %d bytes", h, len(b))
		}
		// A message that decodes re-encodes to the same bytes.
		if got := EncodeHandshake(make([]byte, HandshakeLen), h); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded % x, want % x", got, b)
		}
	})
}

package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestDecode(t *testing.T) {
	valid := Encode(make([]byte, HeaderLen+3), Header{Lobby: 7, Player: 3, Seq: 42, SentUnix: -5})
	copy(valid[HeaderLen:], "abc")
	zeroPlayer := Encode(make([]byte, HeaderLen), Header{Lobby: 1, Player: 0})
	badMagic := bytes.Clone(valid)
	badMagic[3] = 'X'
	v1 := bytes.Clone(valid)
	v1[3] = '1'

	tests := []struct {
		name    string
		in      []byte
		want    Header
		wantErr error
	}{
		{name: "valid with payload", in: valid, want: Header{Lobby: 7, Player: 3, Seq: 42, SentUnix: -5}},
		{name: "header only", in: valid[:HeaderLen], want: Header{Lobby: 7, Player: 3, Seq: 42, SentUnix: -5}},
		{name: "empty", in: nil, wantErr: ErrShort},
		{name: "one byte short", in: valid[:HeaderLen-1], wantErr: ErrShort},
		{name: "wrong magic", in: badMagic, wantErr: ErrMagic},
		{name: "wire version 1", in: v1, wantErr: ErrMagic},
		{name: "player zero", in: zeroPlayer, wantErr: ErrPlayerID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestWireBytes pins the byte layout documented at the top of wire.go, so a
// change to the format cannot pass unnoticed.
func TestWireBytes(t *testing.T) {
	h := Header{Lobby: 0x01020304, Player: 0x05060708, Seq: 0x090a0b0c, SentUnix: 0x0d0e0f1011121314}
	want := []byte{'R', 'L', 'Y', '2', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	if got := Encode(make([]byte, HeaderLen), h); !bytes.Equal(got, want) {
		t.Errorf("Encode: got % x, want % x", got, want)
	}
	if got := AppendHeader([]byte("x"), h); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Errorf("AppendHeader: got % x, want x + % x", got, want)
	}
}

func TestAppendHeaderNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 128)
	h := Header{Lobby: 1, Player: 2, Seq: 3}
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendHeader(buf[:0], h)
		if _, err := Decode(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per encode+decode, want 0", allocs)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("RLY2"))
	f.Add(Encode(make([]byte, HeaderLen), Header{Lobby: 1, Player: 1}))
	f.Add(Encode(make([]byte, HeaderLen+120), Header{Lobby: 4095, Player: 8, Seq: 1 << 31, SentUnix: 1 << 62}))
	f.Add(Encode(make([]byte, HeaderLen), Header{Lobby: 1, Player: 0}))
	v1 := Encode(make([]byte, HeaderLen+8), Header{Lobby: 3, Player: 2})
	binary.BigEndian.PutUint32(v1, MagicV1)
	f.Add(v1)
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		if h, err := DecodeV1(b); err == nil && (h.Player == 0 || KindOf(b) != KindV1) {
			t.Fatalf("DecodeV1 accepted %+v from % x", h, b)
		}
		h, err := Decode(b)
		if !bytes.Equal(in, b) {
			t.Fatalf("Decode modified its input")
		}
		if err != nil {
			if h != (Header{}) {
				t.Fatalf("got header %+v with error %v, want zero header", h, err)
			}
			return
		}
		if h.Player == 0 {
			t.Fatalf("accepted player id 0")
		}
		// A header that decodes re-encodes to the same bytes.
		if got := AppendHeader(nil, h); !bytes.Equal(got, b[:HeaderLen]) {
			t.Fatalf("re-encoded % x, want % x", got, b[:HeaderLen])
		}
	})
}

package handoff

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/lobby"
)

func TestHelloRoundTrip(t *testing.T) {
	h := Hello{PID: 4242, Version: "1.9.0", Listen: "0.0.0.0:7788", Control: "127.0.0.1:7789"}
	got, err := decodeHello(encodeHello(h))
	if err != nil || got != h {
		t.Errorf("got %+v, %v; want %+v", got, err, h)
	}
	b := encodeHello(h)
	binary.BigEndian.PutUint16(b, 2)
	if _, err := decodeHello(b); err == nil || !strings.Contains(err.Error(), "protocol version 2, this relayd speaks 1") {
		t.Errorf("version 2: got %v", err)
	}
	if _, err := decodeHello(b[:7]); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("cut: got %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	table, err := lobby.EncodeTable(nil, nil, 8)
	if err != nil {
		t.Fatal(err)
	}
	s := State{LastRead: 1764500000123456789, Paused: 1764500000223456789,
		Counters: map[string]uint64{"rx_packets": 12, "tx_packets": 84, "a_counter_from_the_future": 1}, Table: table}
	b, err := encodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(b)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("got %+v, %v; want %+v", got, err, s)
	}
	again, _ := encodeState(got)
	if !bytes.Equal(again, b) {
		t.Error("encoding is not deterministic")
	}
}

func TestDecodeStateRefuses(t *testing.T) {
	good, err := encodeState(State{Counters: map[string]uint64{"rx_packets": 1}, Table: []byte("RLYT")})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"cut", good[:len(good)-1], "cut short"},
		{"trailing", append(bytes.Clone(good), 0), "1 bytes after the last field"},
		{"too many counters", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 65); return b }), "65 counters, at most 64"},
		{"empty name", edit(func(b []byte) []byte { b[18] = 0; return b }), "counter name of 0 bytes"},
		{"huge table", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[len(b)-8:], 1<<31); return b }), "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeState(tt.b); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestReadFrameBound(t *testing.T) {
	hdr := []byte{byte(msgState), 0xff, 0xff, 0xff, 0xff}
	if _, _, err := readFrame(bytes.NewReader(hdr)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a 4 GiB frame: got %v, want it refused before reading", err)
	}
	b := appendFrame(nil, msgReady, []byte{0, 0, 0, 7})
	typ, p, err := readFrame(bytes.NewReader(b))
	if err != nil || typ != msgReady || !bytes.Equal(p, []byte{0, 0, 0, 7}) {
		t.Errorf("got %v %x %v", typ, p, err)
	}
}

// FuzzDecodeState: the STATE decoder returns an error or a state that
// encodes back to the same bytes (counters sorted by name, as encodeState
// writes them).
func FuzzDecodeState(f *testing.F) {
	table, _ := lobby.EncodeTable(nil, nil, 8)
	good, _ := encodeState(State{LastRead: 1, Paused: 2, Counters: map[string]uint64{"a": 1, "b": 2}, Table: table})
	f.Add(good)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		again, err := encodeState(s)
		if err != nil {
			t.Fatalf("decoded %x into a state that does not encode: %v", b, err)
		}
		if s2, err := decodeState(again); err != nil || !reflect.DeepEqual(s2, s) {
			t.Fatalf("re-decode: %+v, %v; want %+v", s2, err, s)
		}
	})
}

func TestCheckFolder(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := mk("other", 0o700)
	if err := os.Chown(other, 1, 1); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(mk("target", 0o700), link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, folder, want string
	}{
		{"0700", mk("ok", 0o700), ""},
		{"0755", mk("readable", 0o755), ""},
		{"missing, created 0700", filepath.Join(dir, "new"), ""},
		{"group-writable", mk("group", 0o770), "group- or world-writable (mode 0770)"},
		{"world-writable sticky", mk("tmp", 0o1777), "group- or world-writable (mode 0777)"},
		{"another owner", other, "owned by uid 1"},
		{"symlink", link, "is a symlink"},
		{"a file", file, "is not a folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckFolder(filepath.Join(tt.folder, "handoff.sock"))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(dir, "new")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created folder: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
}

package fdstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/handoff"
	"github.com/relayctl/relayctl/relay/lobby"
)

func TestFromEnviron(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		wantMax int
		wantErr string
	}{
		{"systemd with a store", []string{"NOTIFY_SOCKET=/run/systemd/notify", "FDSTORE=4"}, 4, ""},
		{"first FDSTORE wins", []string{"FDSTORE=8", "NOTIFY_SOCKET=@x", "FDSTORE=1"}, 8, ""},
		{"not under systemd", []string{"FDSTORE=4"}, 0, "NOTIFY_SOCKET is not set"},
		{"size not known", []string{"NOTIFY_SOCKET=/run/systemd/notify"}, 0, "FDSTORE is not set"},
		{"too small", []string{"NOTIFY_SOCKET=/run/systemd/notify", "FDSTORE=2"}, 0, "FDSTORE=2, relayd keeps up to 3 descriptors there"},
		{"not a number", []string{"NOTIFY_SOCKET=/run/systemd/notify", "FDSTORE=four"}, 0, `FDSTORE="four"`},
		{"negative", []string{"NOTIFY_SOCKET=/run/systemd/notify", "FDSTORE=-3"}, 0, `FDSTORE="-3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromEnviron(tt.environ)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || s != nil {
					t.Errorf("got %v, %v; want an error containing %q", s, err, tt.wantErr)
				}
				return
			}
			if err != nil || s.Max() != tt.wantMax {
				t.Fatalf("got %v, %v; want max %d", s, err, tt.wantMax)
			}
		})
	}
	if _, err := FromEnviron([]string{"NOTIFY_SOCKET=/n", "FDSTORE=2"}); !errors.Is(err, ErrStoreTooSmall) {
		t.Errorf("FDSTORE=2: %v, want ErrStoreTooSmall", err)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{NameUDP, NameStateA, NameStateB, strings.Repeat("x", 255)} {
		if err := checkName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a:b", "a\nFDSTOREREMOVE=1", "tab\t", strings.Repeat("x", 256), "é"} {
		if err := checkName(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	// A name never reaches the notify socket unchecked: it could add a
	// line of its own to the message.
	s := &Store{socket: "/nonexistent", max: 4}
	if err := s.Put("x\nFDSTOREREMOVE=1", 0); err == nil || !strings.Contains(err.Error(), "printable ASCII") {
		t.Errorf("Put with a newline in the name: %v", err)
	}
}

// TestInheritedRefuses covers what is decided before any descriptor is
// looked at.
func TestInheritedRefuses(t *testing.T) {
	pid := os.Getpid()
	me := "LISTEN_PID=" + strconv.Itoa(pid)
	tests := []struct {
		name    string
		environ []string
		wantErr string
	}{
		{"nothing passed", []string{"HOME=/"}, ""},
		{"meant for another process", []string{"LISTEN_PID=1", "LISTEN_FDS=2", "LISTEN_FDNAMES=a:b"}, ""},
		{"no count", []string{me}, `LISTEN_FDS=""`},
		{"count not a number", []string{me, "LISTEN_FDS=two"}, `LISTEN_FDS="two"`},
		{"count too large", []string{me, "LISTEN_FDS=4097"}, `LISTEN_FDS="4097"`},
		{"names do not match the count", []string{me, "LISTEN_FDS=2", "LISTEN_FDNAMES=relayd-udp"}, "1 names for LISTEN_FDS=2"},
		{"descriptor not open", []string{me, "LISTEN_FDS=4096"}, "descriptor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := Inherited(tt.environ, pid)
			if tt.wantErr == "" {
				if err != nil || files != nil {
					t.Errorf("got %v, %v; want nothing and no error", files, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || files != nil {
				t.Errorf("got %v, %v; want an error containing %q", files, err, tt.wantErr)
			}
		})
	}
}

// TestInherited passes two descriptors to a child process as systemd does
// (from descriptor 3, named in LISTEN_FDNAMES): the child finds them by
// name and checks what each is.
func TestInherited(t *testing.T) {
	if os.Getenv("FDSTORE_TEST_CHILD") == "1" {
		inheritedChild()
		return
	}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	uf, err := udp.File()
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()
	fd, err := WriteMemfd([]byte("state"))
	if err != nil {
		t.Fatal(err)
	}
	mf := os.NewFile(uintptr(fd), "memfd")
	defer mf.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInherited$")
	cmd.Env = append(os.Environ(), "FDSTORE_TEST_CHILD=1", "LISTEN_FDS=2", "LISTEN_FDNAMES="+NameStateB+":"+NameUDP,
		"WANT_PORT="+strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port))
	cmd.ExtraFiles = []*os.File{mf, uf}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func inheritedChild() {
	environ := append(os.Environ(), "LISTEN_PID="+strconv.Itoa(os.Getpid()))
	files, err := Inherited(environ, os.Getpid())
	fail := func(f string, a ...any) { fmt.Printf(f+"\n", a...); os.Exit(1) }
	if err != nil || len(files) != 2 {
		fail("Inherited: %v, %v", files, err)
	}
	inv := Sort(files)
	if len(inv.UDP) != 1 || len(inv.States) != 1 || len(inv.Other) != 0 || inv.UDP[0].FD != 4 || inv.States[0].FD != 3 {
		fail("Sort: %+v", inv)
	}
	sa, err := unix.Getsockname(inv.UDP[0].FD)
	if p := strconv.Itoa(sa.(*unix.SockaddrInet4).Port); err != nil || p != os.Getenv("WANT_PORT") {
		fail("getsockname: %v %v", sa, err)
	}
	if b, err := ReadMemfd(inv.States[0].FD); err != nil || string(b) != "state" {
		fail("ReadMemfd: %q %v", b, err)
	}
	for _, f := range files {
		if flags, _ := unix.FcntlInt(uintptr(f.FD), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
			fail("fd %d is not close-on-exec", f.FD)
		}
	}
	fmt.Println("child ok")
	os.Exit(0)
}

func TestSortAndNames(t *testing.T) {
	files := []File{{NameStateA, 3}, {"unknown", 4}, {NameUDP, 5}, {NameStateB, 6}, {"old-thing", 7}, {"unknown", 8}, {NameUDP, 9}}
	inv := Sort(files)
	if !reflect.DeepEqual(inv.UDP, []File{{NameUDP, 5}, {NameUDP, 9}}) || !reflect.DeepEqual(inv.States, []File{{NameStateA, 3}, {NameStateB, 6}}) ||
		!reflect.DeepEqual(inv.Other, []File{{"unknown", 4}, {"old-thing", 7}, {"unknown", 8}}) {
		t.Errorf("Sort: %+v", inv)
	}
	if got := Names(inv.Other); !reflect.DeepEqual(got, []string{"unknown", "old-thing"}) {
		t.Errorf("Names: %q", got)
	}
}

func testSaved(t testing.TB, players int) Saved {
	t.Helper()
	var snap lobby.Snapshot
	for i := 0; i < players; i += 8 {
		l := lobby.LobbySnapshot{ID: uint32(i / 8)}
		for j := i; j < min(i+8, players); j++ {
			l.Members = append(l.Members, lobby.MemberSnapshot{Player: uint32(j%8 + 1),
				Addr: netipAddrPort(byte(j>>8), byte(j), 1, 40000+uint16(j)), Idle: 15e6})
		}
		snap = append(snap, l)
	}
	table, err := lobby.EncodeTable(nil, snap, 8)
	if err != nil {
		t.Fatal(err)
	}
	return Saved{Seq: 7, Final: true, PID: 4242, Inode: 183546, Release: "1.9.0",
		State: handoff.State{LastRead: 1764500000123456789, Paused: 1764500000223456789,
			Counters: map[string]uint64{"rx_packets": 1200, "tx_packets": 8400}, Table: table}}
}

func TestSavedRoundTrip(t *testing.T) {
	for _, players := range []int{0, 1, 64} {
		s := testSaved(t, players)
		b, err := EncodeSaved(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeSaved(b)
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("%d players: got %+v, %v; want %+v", players, got, err, s)
		}
		if again, _ := EncodeSaved(got); !bytes.Equal(again, b) {
			t.Errorf("%d players: not deterministic", players)
		}
		snap, _, err := lobby.DecodeTable(got.State.Table)
		if err != nil || snap.Players() != players {
			t.Errorf("%d players: the table decodes to %d players, %v", players, snap.Players(), err)
		}
	}
}

func TestDecodeSavedRefuses(t *testing.T) {
	good, err := EncodeSaved(testSaved(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name, want string
		b          []byte
	}{
		{"empty", "shorter than the 30-byte header", nil},
		{"magic", `magic "RLYT"`, edit(func(b []byte) []byte { copy(b, "RLYT"); return b })},
		{"version", "version 2: unsupported saved state version", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], 2); return b })},
		{"flags", "unknown flags 0x3", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], 3); return b })},
		{"pid", "pid 4294967295", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[16:], 1<<32-1); return b })},
		{"release too long", "a release of 257 bytes", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[28:], 257); return b })},
		{"release past the end", "a release of 60000 bytes", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[28:], 60000); return b })},
		{"state cut short", "a state of", good[:len(good)-1]},
		{"bytes after the state", "a state of", append(bytes.Clone(good), 0)},
		{"state length too large", "at most", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[35:], 1<<31); return b })},
		{"state does not decode", "decode STATE", edit(func(b []byte) []byte { b[39+16] = 0xff; return b })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeSaved(tt.b); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := DecodeSaved(edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], 2); return b })); !errors.Is(err, ErrSavedVersion) {
		t.Errorf("version 2: %v, want ErrSavedVersion", err)
	}
	// STATE's own decoder takes counters in any order; a saved state is
	// only what EncodeSaved writes (the fuzzer found this one).
	two := Saved{Release: "1.9.0", State: handoff.State{Counters: map[string]uint64{"a": 1, "b": 2}}}
	b, err := EncodeSaved(two)
	if err != nil {
		t.Fatal(err)
	}
	const counters = 39 + 18 // the state, then last read, paused and the count
	a, bb := bytes.Clone(b[counters:counters+10]), bytes.Clone(b[counters+10:counters+20])
	copy(b[counters:], bb)
	copy(b[counters+10:], a)
	if _, err := DecodeSaved(b); err == nil || !strings.Contains(err.Error(), "counters out of order") {
		t.Errorf("counters b, a: got %v, want them refused", err)
	}
	if _, err := EncodeSaved(Saved{Release: strings.Repeat("v", 257)}); err == nil {
		t.Error("a release of 257 bytes encoded")
	}
}

// FuzzDecodeSaved: whatever DecodeSaved accepts encodes back to the same
// bytes, so it accepts nothing EncodeSaved could not have written.
func FuzzDecodeSaved(f *testing.F) {
	for _, players := range []int{0, 3, 16} {
		b, err := EncodeSaved(testSaved(f, players))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSaved(b)
		if err != nil {
			return
		}
		again, err := EncodeSaved(s)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", s, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", b, again)
		}
	})
}

func TestMemfd(t *testing.T) {
	want := []byte("RLYS and some bytes")
	fd, err := WriteMemfd(want)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	got, err := ReadMemfd(fd)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %q, %v", got, err)
	}
	// Sealed: nobody holding it can change it.
	if _, err := unix.Pwrite(fd, []byte("X"), 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("write to the sealed memfd: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(fd, 1); !errors.Is(err, unix.EPERM) {
		t.Errorf("truncate the sealed memfd: %v, want EPERM", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("change the seals: %v, want EPERM", err)
	}
}

func TestReadMemfdRefuses(t *testing.T) {
	unsealed, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(unsealed)
	unix.Write(unsealed, []byte("RLYS"))
	huge, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(huge)
	if err := unix.Ftruncate(huge, MaxSavedBytes+1); err != nil {
		t.Fatal(err)
	}
	unix.FcntlInt(uintptr(huge), unix.F_ADD_SEALS, seals)
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	sock, err := udp.File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	tests := []struct {
		name string
		fd   int
		want string
	}{
		{"not sealed", unsealed, "seals 0x0, want 0xf"},
		{"too large", huge, fmt.Sprintf("%d bytes, at most %d", MaxSavedBytes+1, MaxSavedBytes)},
		{"a socket", int(sock.Fd()), "not a regular file"},
		{"closed", 1 << 20, "bad file descriptor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadMemfd(tt.fd); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// notifySocket is a unixgram socket in place of systemd's: it records
// every message and reads the memfds that come with them.
type message struct {
	text  string
	saved *Saved // the state in the memfd sent with it, if any
}

func notifySocket(t *testing.T) (string, func() message) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, func() message {
		t.Helper()
		buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		m := message{text: string(buf[:n])}
		cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, cm := range cmsgs {
			fds, _ := unix.ParseUnixRights(&cm)
			for _, fd := range fds {
				if b, err := ReadMemfd(fd); err == nil {
					s, err := DecodeSaved(b)
					if err != nil {
						t.Errorf("a memfd that does not decode: %v", err)
					}
					m.saved = &s
				}
				unix.Close(fd)
			}
		}
		return m
	}
}

// TestKeeperAlternates: each save stores the new state under the name the
// store does not hold and only then removes the other, so a crash between
// the two messages leaves the newer state in the store, never none.
func TestKeeperAlternates(t *testing.T) {
	path, next := notifySocket(t)
	k := NewKeeper(&Store{socket: path, max: 4}, NameStateB, 41)
	want := []struct {
		name   string
		remove string
	}{{NameStateA, NameStateB}, {NameStateB, NameStateA}, {NameStateA, NameStateB}}
	for i, w := range want {
		s := testSaved(t, 8)
		name, size, err := k.Save(s)
		if err != nil || name != w.name || size == 0 {
			t.Fatalf("save %d: %q, %d, %v; want %s", i, name, size, err, w.name)
		}
		put := next()
		if put.text != "FDSTORE=1\nFDNAME="+w.name+"\nFDPOLL=0" || put.saved == nil || put.saved.Seq != uint64(42+i) {
			t.Errorf("save %d: first message %q with %+v, want FDSTORE of %s with sequence %d", i, put.text, put.saved, w.name, 42+i)
		}
		if rm := next(); rm.text != "FDSTOREREMOVE=1\nFDNAME="+w.remove || rm.saved != nil {
			t.Errorf("save %d: second message %q, want the removal of %s", i, rm.text, w.remove)
		}
	}
	// A first save with nothing in the store removes nothing.
	k = NewKeeper(&Store{socket: path, max: 4}, "", 0)
	if name, _, err := k.Save(testSaved(t, 0)); err != nil || name != NameStateA {
		t.Fatalf("first save: %q, %v", name, err)
	}
	if m := next(); !strings.HasPrefix(m.text, "FDSTORE=1\nFDNAME="+NameStateA) || m.saved.Seq != 1 {
		t.Errorf("first save: %q seq %v", m.text, m.saved)
	}
	if name, _, err := k.Save(testSaved(t, 0)); err != nil || name != NameStateB {
		t.Fatalf("second save: %q, %v", name, err)
	}
	if m := next(); !strings.HasPrefix(m.text, "FDSTORE=1\nFDNAME="+NameStateB) {
		t.Errorf("second save: %q, want FDSTORE first", m.text)
	}
	if m := next(); m.text != "FDSTOREREMOVE=1\nFDNAME="+NameStateA {
		t.Errorf("second save: %q, want the removal of the first", m.text)
	}
}

func TestKeeperSaveFails(t *testing.T) {
	k := NewKeeper(&Store{socket: filepath.Join(t.TempDir(), "none"), max: 4}, NameStateA, 3)
	if _, _, err := k.Save(testSaved(t, 8)); !errors.Is(err, unix.ENOENT) {
		t.Errorf("nobody listening: %v, want ENOENT", err)
	}
	// Nothing was stored, so the next save still goes to the other name.
	if k.cur != NameStateA || k.seq != 3 {
		t.Errorf("after a failed save: cur %q seq %d, want %s 3", k.cur, k.seq, NameStateA)
	}
}

func TestNewest(t *testing.T) {
	file := func(name string, seq uint64, corrupt bool) File {
		s := testSaved(t, 8)
		s.Seq = seq
		b, err := EncodeSaved(s)
		if err != nil {
			t.Fatal(err)
		}
		if corrupt {
			b = b[:len(b)-1]
		}
		fd, err := WriteMemfd(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return File{Name: name, FD: fd}
	}
	tests := []struct {
		name        string
		files       []File
		want        string
		wantSeq     uint64
		wantRefused int
	}{
		{"none", nil, "", 0, 0},
		{"one", []File{file(NameStateA, 5, false)}, NameStateA, 5, 0},
		{"the newer of two", []File{file(NameStateA, 5, false), file(NameStateB, 6, false)}, NameStateB, 6, 1},
		{"the newer first", []File{file(NameStateB, 9, false), file(NameStateA, 8, false)}, NameStateB, 9, 1},
		{"the newer does not decode", []File{file(NameStateA, 5, false), file(NameStateB, 6, true)}, NameStateA, 5, 1},
		{"none decodes", []File{file(NameStateA, 5, true)}, "", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			best, ok, refused := Newest(tt.files)
			if ok != (tt.want != "") || best.Name != tt.want || best.Saved.Seq != tt.wantSeq || len(refused) != tt.wantRefused {
				t.Errorf("got %q seq %d ok %v, refused %v; want %q seq %d, %d refused", best.Name, best.Saved.Seq, ok, refused, tt.want, tt.wantSeq, tt.wantRefused)
			}
		})
	}
}

func netipAddrPort(a, b, c byte, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, a, b, c}), port)
}

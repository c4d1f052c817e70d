package sdnotify_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/sdnotify"
)

// listen opens a real unixgram socket, as systemd's notify socket is.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %q: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// receive reads one datagram and the descriptors that came with it.
func receive(t *testing.T, c *net.UnixConn) (string, []int) {
	t.Helper()
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*8))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		t.Fatal("control message truncated")
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatalf("parse control messages: %v", err)
	}
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			t.Fatalf("parse rights: %v", err)
		}
		fds = append(fds, got...)
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return string(buf[:n]), fds
}

func sameFile(t *testing.T, a, b int) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func TestSendState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	const state = "READY=1\nSTATUS=relaying on 0.0.0.0:7788"
	if err := sdnotify.Send(path, state); err != nil {
		t.Fatal(err)
	}
	got, fds := receive(t, c)
	if got != state || len(fds) != 0 {
		t.Errorf("got %q with %d fds, want %q and none", got, len(fds), state)
	}
}

// TestSendFDs passes a UDP socket and a pipe, as the fd store will: the
// receiver gets descriptors of the same open files, usable on its own.
func TestSendFDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
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
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	state := sdnotify.FDStore + "\nFDNAME=relay-udp"
	if err := sdnotify.Send(path, state, int(uf.Fd()), int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	got, fds := receive(t, c)
	if got != state {
		t.Errorf("state: got %q, want %q", got, state)
	}
	if len(fds) != 2 {
		t.Fatalf("got %d fds, want 2", len(fds))
	}
	if !sameFile(t, fds[0], int(uf.Fd())) {
		t.Errorf("fd 0 is not the UDP socket")
	}
	if typ, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
		t.Errorf("fd 0: SO_TYPE %d, %v; want SOCK_DGRAM", typ, err)
	}
	if _, err := unix.Write(fds[1], []byte("through the passed fd")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := r.Read(buf)
	if string(buf[:n]) != "through the passed fd" {
		t.Errorf("pipe read %q", buf[:n])
	}
}

func TestAbstractSocket(t *testing.T) {
	b := make([]byte, 8)
	rand.Read(b)
	name := "@relayctl-sdnotify-test-" + hex.EncodeToString(b)
	c := listen(t, name)
	if err := sdnotify.Send(name, sdnotify.Stopping); err != nil {
		t.Fatal(err)
	}
	if got, _ := receive(t, c); got != sdnotify.Stopping {
		t.Errorf("got %q, want %q", got, sdnotify.Stopping)
	}
}

func TestNotifyEnviron(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	sent, err := sdnotify.Notify([]string{"HOME=/root", "NOTIFY_SOCKET=" + path}, sdnotify.Ready)
	if !sent || err != nil {
		t.Fatalf("got %v, %v; want sent", sent, err)
	}
	if got, _ := receive(t, c); got != sdnotify.Ready {
		t.Errorf("got %q, want %q", got, sdnotify.Ready)
	}
	if sent, err := sdnotify.Notify([]string{"HOME=/root"}, sdnotify.Ready); sent || err != nil {
		t.Errorf("without NOTIFY_SOCKET: got %v, %v; want nothing sent, no error", sent, err)
	}
}

func TestSendErrors(t *testing.T) {
	dir := t.TempDir()
	listen(t, filepath.Join(dir, "notify"))
	tests := []struct {
		name, socket string
		fds          []int
		want         error
		wantText     string
	}{
		{"relative path", "run/notify", nil, sdnotify.ErrUnsupportedSocket, `"run/notify": want an absolute path or @name`},
		{"bare @", "@", nil, sdnotify.ErrUnsupportedSocket, "want an absolute path"},
		{"vsock", "vsock:2:1", nil, sdnotify.ErrUnsupportedSocket, "vsock:2:1"},
		{"nobody listens", filepath.Join(dir, "none"), nil, syscall.ENOENT, "send notify to " + filepath.Join(dir, "none")},
		{"closed fd", filepath.Join(dir, "notify"), []int{1 << 20}, syscall.EBADF, "bad file descriptor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sdnotify.Send(tt.socket, sdnotify.Ready, tt.fds...)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("got %v, want %v containing %q", err, tt.want, tt.wantText)
			}
		})
	}
}

// TestBarrier: Barrier returns when the receiver closes the pipe it got
// (as systemd does once it has handled the messages before it), and times
// out while the receiver holds it.
func TestBarrier(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	done := make(chan error, 1)
	go func() { done <- sdnotify.Barrier(path, 5*time.Second) }()
	got, fds := receive(t, c)
	if got != "BARRIER=1" || len(fds) != 1 {
		t.Fatalf("got %q with %d fds, want BARRIER=1 with one", got, len(fds))
	}
	select {
	case err := <-done:
		t.Fatalf("Barrier returned %v before the receiver closed the pipe", err)
	case <-time.After(50 * time.Millisecond):
	}
	unix.Close(fds[0])
	if err := <-done; err != nil {
		t.Errorf("Barrier: %v", err)
	}

	go func() { done <- sdnotify.Barrier(path, 100*time.Millisecond) }()
	_, held := receive(t, c) // closed at cleanup, after the timeout
	if err := <-done; !errors.Is(err, sdnotify.ErrBarrierTimeout) || len(held) != 1 {
		t.Errorf("a receiver that keeps the pipe: got %v, want %v", err, sdnotify.ErrBarrierTimeout)
	}
	if err := sdnotify.Barrier(filepath.Join(t.TempDir(), "none"), time.Second); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("nobody listening: got %v, want ENOENT", err)
	}
}

package shellhost

import (
	"testing"

	"golang.org/x/sys/unix"
)

func getRcvbuf(t *testing.T, fd uintptr) int {
	v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

package fdstore

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkSave is one save of the state in the store: encode, a sealed
// memfd, two messages to the notify socket (here a unixgram socket whose
// reader closes what it gets, as systemd closes the state it replaces).
// relayd saves at most every 250 ms while players come and go, and every
// second while they play.
func BenchmarkSave(b *testing.B) {
	for _, players := range []int{64, 4096, 32768} {
		b.Run(fmt.Sprintf("players=%d", players), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "notify")
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			go func() {
				buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
				for {
					_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
					if err != nil {
						return
					}
					cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
					for _, cm := range cmsgs {
						fds, _ := unix.ParseUnixRights(&cm)
						for _, fd := range fds {
							unix.Close(fd)
						}
					}
				}
			}()
			s := testSaved(b, players)
			k := NewKeeper(&Store{socket: path, max: 4}, "", 0)
			b.ResetTimer()
			for range b.N {
				if _, size, err := k.Save(s); err != nil {
					b.Fatal(err)
				} else {
					b.SetBytes(int64(size))
				}
			}
		})
	}
}

// delayproxy forwards TCP connections and delays every byte by a fixed
// time each way, so lab hosts on loopback look as far away as hosts in
// another region (this machine's kernel has no netem). A round trip
// through it takes twice -delay more than it would. It models distance,
// not bandwidth: bytes are held back, never rationed.
//
//	delayproxy -delay 25ms LISTEN=TARGET [LISTEN=TARGET ...]
//	delayproxy -delay 25ms 127.0.1.1:2222=127.0.0.1:2222
//
// It runs until killed; scripts/bench-apply.sh (RTT_MS) starts and stops it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	delay := flag.Duration("delay", 25*time.Millisecond, "how long each byte is held back, each way")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: delayproxy -delay D LISTEN=TARGET...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *delay < 0 {
		flag.Usage()
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for _, pair := range flag.Args() {
		listen, target, ok := strings.Cut(pair, "=")
		if !ok || listen == "" || target == "" {
			fmt.Fprintf(os.Stderr, "delayproxy: %q: want LISTEN=TARGET, e.g. 127.0.1.1:2222=127.0.0.1:2222\n", pair)
			os.Exit(2)
		}
		l, err := net.Listen("tcp", listen)
		if err != nil {
			fmt.Fprintf(os.Stderr, "delayproxy: %v\n", err)
			os.Exit(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(l, target, *delay)
		}()
	}
	wg.Wait()
}

func serve(l net.Listener, target string, delay time.Duration) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			fmt.Fprintf(os.Stderr, "delayproxy: accept: %v\n", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			t, err := net.Dial("tcp", target)
			if err != nil {
				fmt.Fprintf(os.Stderr, "delayproxy: %v\n", err)
				return
			}
			defer t.Close()
			done := make(chan struct{}, 2)
			go func() { pipe(t, c, delay); done <- struct{}{} }()
			go func() { pipe(c, t, delay); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

// chunk is bytes read at a time, due for writing at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each read written delay after it was read, in
// order; when src ends, dst's write side is closed after the last chunk.
func pipe(dst, src net.Conn, delay time.Duration) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.b); err != nil {
			src.Close() // ends the reader, which closes q
			for range q {
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

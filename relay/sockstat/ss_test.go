package sockstat

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read testdata: %v", err)
	}
	return b
}

func TestParseSSCaptured(t *testing.T) {
	drops := Socket{State: "UNCONN", Local: "127.0.0.1", Port: 58536, Rmem: 212480, Rcvbuf: 212992,
		Sndbuf: 212992, Drops: 134, PIDs: []int{13779}, Process: "sx"}
	dropsNoP := drops
	dropsNoP.PIDs, dropsNoP.Process = nil, ""
	v6 := Socket{State: "UNCONN", Local: "::1", Port: 57989, Rcvbuf: 212992, Sndbuf: 212992, PIDs: []int{13779}, Process: "sx"}
	dual := Socket{State: "UNCONN", Local: "*", Port: 35674, Rcvbuf: 212992, Sndbuf: 212992, PIDs: []int{13779}, Process: "sx"}
	shared := []int{14105, 14063}
	unbound := func(addr string, ino uint64) Socket {
		return Socket{State: "UNCONN", Local: addr, Port: 53, Rcvbuf: 16777216, Sndbuf: 212992, Inode: ino, PIDs: []int{105}, Process: "unbound"}
	}
	tests := []struct {
		file string
		want []Socket
	}{
		{"ss_udp4_drops.txt", []Socket{dropsNoP}},
		{"ss_udp4_drops_p.txt", []Socket{drops}},
		{"ss_header_p.txt", []Socket{drops}},
		{"ss_wrapped_p.txt", []Socket{drops}},
		{"ss_udp6_p.txt", []Socket{v6}},
		{"ss_dualstack_p.txt", []Socket{dual}},
		{"ss_all_p.txt", []Socket{drops, v6, dual}},
		{"ss_empty.txt", []Socket{}},
		{"ss_all_a_p.txt", []Socket{
			{State: "UNCONN", Local: "127.0.0.1", Port: 55714, Rmem: 2496, Rcvbuf: 212992, Sndbuf: 212992, PIDs: []int{13843}, Process: "sx"},
			{State: "ESTAB", Local: "127.0.0.1", Port: 39850, Rcvbuf: 212992, Sndbuf: 212992, PIDs: []int{13843}, Process: "sx"},
			{State: "UNCONN", Local: "::1", Port: 43485, Rcvbuf: 212992, Sndbuf: 212992, PIDs: []int{13843}, Process: "sx"},
			{State: "UNCONN", Local: "*", Port: 60536, Rcvbuf: 212992, Sndbuf: 212992, PIDs: []int{13843}, Process: "sx"},
		}},
		{"ss_packaged_e_p.txt", []Socket{
			unbound("127.0.0.1", 2732281), unbound("127.0.0.1", 2732277),
			{State: "UNCONN", Local: "127.0.0.1", Port: 11211, Rcvbuf: 212992, Sndbuf: 8388608, Inode: 2731794, PIDs: []int{97}, Process: "memcached"},
			unbound("::1", 2732275), unbound("::1", 2732279),
		}},
		{"ss_7788_shared_p.txt", []Socket{
			{State: "UNCONN", Local: "127.0.0.53%lo", Port: 7788, Rcvbuf: 212992, Sndbuf: 212992, PIDs: shared, Process: "python3"},
			{State: "UNCONN", Local: "0.0.0.0", Port: 7788, Rcvbuf: 8388608, Sndbuf: 212992, PIDs: shared, Process: "python3"},
			{State: "UNCONN", Local: "::", Port: 7788, Rcvbuf: 212992, Sndbuf: 212992, PIDs: shared, Process: "python3"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseSS(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("ParseSS: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseSS:\ngot  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseSSLines(t *testing.T) {
	const sk = " skmem:(r0,rb425984,t0,tb212992,f0,w0,o0,bl0,d7)"
	tests := []struct {
		name    string
		in      string
		want    Socket
		wantErr string
	}{
		{"design example", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* users:((\"relayd\",pid=123,fd=3))" + sk,
			Socket{State: "UNCONN", Local: "0.0.0.0", Port: 7788, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, PIDs: []int{123}, Process: "relayd"}, ""},
		{"name with space and parens", `UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* users:(("relay (x) d",pid=9,fd=3))` + sk,
			Socket{State: "UNCONN", Local: "0.0.0.0", Port: 7788, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, PIDs: []int{9}, Process: "relay (x) d"}, ""},
		{"same pid twice", `UNCONN 0 0 *:7788 *:* users:(("relayd",pid=9,fd=3),("relayd",pid=9,fd=4))` + sk,
			Socket{State: "UNCONN", Local: "*", Port: 7788, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, PIDs: []int{9}, Process: "relayd"}, ""},
		{"netid column", "udp UNCONN 0 0 [fe80::1]%eth0:123 [::]:*" + sk,
			Socket{State: "UNCONN", Local: "fe80::1%eth0", Port: 123, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7}, ""},
		{"unknown skmem field kept out", "UNCONN 0 0 1.2.3.4:1 0.0.0.0:* skmem:(r1,rb2,t3,tb4,f0,w0,o0,bl0,d5,zz9)",
			Socket{State: "UNCONN", Local: "1.2.3.4", Port: 1, Rmem: 1, Rcvbuf: 2, Wmem: 3, Sndbuf: 4, Drops: 5}, ""},
		{"ss -e inode", "UNCONN 0 0 127.0.0.1:7788 0.0.0.0:* ino:78944 sk:104d cgroup:/ <->" + sk,
			Socket{State: "UNCONN", Local: "127.0.0.1", Port: 7788, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, Inode: 78944}, ""},
		{"ss -e -p: uid and inode after users", `UNCONN 0 0 127.0.0.1:11211 0.0.0.0:* users:(("memcached",pid=537,fd=25),("memcached",pid=537,fd=24)) uid:103 ino:2010785 sk:5d7 cgroup:/system.slice/memcached.service <->` + sk,
			Socket{State: "UNCONN", Local: "127.0.0.1", Port: 11211, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, Inode: 2010785, PIDs: []int{537}, Process: "memcached"}, ""},
		{"an inode in a process name counts for nothing", `UNCONN 0 0 127.0.0.1:53 0.0.0.0:* users:(("x ino:5 ",pid=7,fd=3)) ino:42 sk:1 <->` + sk,
			Socket{State: "UNCONN", Local: "127.0.0.1", Port: 53, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, Inode: 42, PIDs: []int{7}, Process: "x ino:5 "}, ""},
		{"ss -p without -e: a process name holding ino:", `UNCONN 0 0 127.0.0.1:53 0.0.0.0:* users:(("x ino:5",pid=7,fd=3))` + sk,
			Socket{State: "UNCONN", Local: "127.0.0.1", Port: 53, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, PIDs: []int{7}, Process: "x ino:5"}, ""},
		{"bad inode after users", `UNCONN 0 0 127.0.0.1:53 0.0.0.0:* users:(("x",pid=7,fd=3)) ino:4x` + sk, Socket{}, `ino "4x" is not a number`},
		{"ss -e -p: inode after users", `UNCONN 0 0 127.0.0.1:7788 0.0.0.0:* users:(("relayd",pid=9,fd=3)) ino:78944 sk:17c3 cgroup:/ <->` + sk,
			Socket{State: "UNCONN", Local: "127.0.0.1", Port: 7788, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, Inode: 78944, PIDs: []int{9}, Process: "relayd"}, ""},
		{"a process named to forge an inode", `UNCONN 0 0 127.0.0.1:7788 0.0.0.0:* users:(("x ino:1",pid=9,fd=3)) ino:78944 sk:1 <->` + sk,
			Socket{State: "UNCONN", Local: "127.0.0.1", Port: 7788, Rcvbuf: 425984, Sndbuf: 212992, Drops: 7, Inode: 78944, PIDs: []int{9}, Process: "x ino:1"}, ""},
		{"bad inode", "UNCONN 0 0 127.0.0.1:7788 0.0.0.0:* ino:x1" + sk, Socket{}, `ino "x1" is not a number`},
		{"no skmem", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:*", Socket{}, "run ss with -m"},
		{"service name port", "UNCONN 0 0 0.0.0.0:domain 0.0.0.0:*" + sk, Socket{}, "run ss with -n"},
		{"port too big", "UNCONN 0 0 0.0.0.0:65536 0.0.0.0:*" + sk, Socket{}, "from 0 to 65535"},
		{"negative port", "UNCONN 0 0 0.0.0.0:-1 0.0.0.0:*" + sk, Socket{}, "from 0 to 65535"},
		{"too few columns", "UNCONN 0.0.0.0:7788" + sk, Socket{}, "want state, Recv-Q"},
		{"no d", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* skmem:(r0,rb1,t0,tb1,f0,w0,o0)", Socket{}, "skmem has no d field"},
		{"garbage skmem", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* skmem:(r0,rbx,t0)", Socket{}, `skmem item "rbx"`},
		{"duplicate skmem", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* skmem:(r0,r1,rb1,t0,tb1,d0)", Socket{}, "r twice"},
		{"unclosed skmem", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* skmem:(r0,rb1", Socket{}, "no closing parenthesis"},
		{"overflow", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* skmem:(r0,rb99999999999999999999,t0,tb1,d0)", Socket{}, "not a name and a number"},
		{"bad pid", `UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* users:(("x",pid=,fd=3))` + sk, Socket{}, "not a positive number"},
		{"users unclosed", `UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* users:(("x",pid=3` + sk, Socket{}, "users:"},
		{"bracket unclosed", "UNCONN 0 0 [::1:7788 [::]:*" + sk, Socket{}, "no closing bracket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSS([]byte(tt.in + "\n"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSS: got error %v, want one containing %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "parse ss line 1: ") {
					t.Errorf("error %q does not name the line", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSS: %v", err)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Errorf("ParseSS:\ngot  %+v\nwant [%+v]", got, tt.want)
			}
		})
	}
}

func TestParseSSContinuationFirst(t *testing.T) {
	_, err := ParseSS([]byte("\t skmem:(r0,rb1,t0,tb1,d0)\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1: continuation") {
		t.Errorf("ParseSS: got %v, want a continuation error on line 1", err)
	}
}

func TestFilterPort(t *testing.T) {
	socks, err := ParseSS(readTestdata(t, "ss_all_a_p.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		port int
		want int
	}{{55714, 1}, {39850, 1}, {60536, 1}, {7788, 0}}
	for _, tt := range tests {
		got := FilterPort(socks, tt.port)
		if len(got) != tt.want {
			t.Errorf("FilterPort(%d): got %d sockets, want %d", tt.port, len(got), tt.want)
		}
		for _, s := range got {
			if s.Port != tt.port {
				t.Errorf("FilterPort(%d): got a socket on port %d", tt.port, s.Port)
			}
		}
	}
}

func FuzzParseSS(f *testing.F) {
	files, err := filepath.Glob("testdata/ss_*.txt")
	if err != nil || len(files) == 0 {
		f.Fatalf("glob testdata: %v (%d files)", err, len(files))
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* users:(("relayd",pid=123,fd=3)) skmem:(r0,rb425984,t0,tb212992,f0,w0,o0,bl0,d0)`))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, err := ParseSS(b)
		if err != nil {
			return
		}
		for _, s := range socks {
			if s.Port < 0 || s.Port > 65535 || s.Local == "" || s.State == "" {
				t.Fatalf("ParseSS accepted %+v", s)
			}
			for _, pid := range s.PIDs {
				if pid <= 0 {
					t.Fatalf("ParseSS accepted pid %d", pid)
				}
			}
		}
	})
}

// A service's sockets are the ones its processes hold: another program's
// socket on the same port in the namespace is not read back as its.
func TestReadBackOfTheServicesSockets(t *testing.T) {
	const sk = " skmem:(r0,rb%d,t0,tb212992,f0,w0,o0,bl0,d%d)"
	ss := fmt.Sprintf(`UNCONN 0 0 127.0.0.1:53 0.0.0.0:* users:(("unbound",pid=10,fd=3)) ino:1`+sk+"\n"+
		`UNCONN 0 0 [::1]:53 [::]:* users:(("unbound",pid=11,fd=4)) ino:2`+sk+"\n"+
		`UNCONN 0 0 0.0.0.0:53 0.0.0.0:* users:(("dnsmasq",pid=99,fd=5)) ino:3`+sk+"\n", 16777216, 1, 16777216, 2, 212992, 40)
	r, err := ReadBackOf([]byte(ss), nil, nil, 53, []int{10, 11})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sockets != 2 || len(r.Each) != 2 || r.MinRcvbuf != 16777216 || r.Drops != 3 || r.Inode != 1 {
		t.Errorf("got %d sockets (%d each), min rb %d, drops %d, inode %d; want unbound's two", r.Sockets, len(r.Each), r.MinRcvbuf, r.Drops, r.Inode)
	}
	all, _ := ReadBack([]byte(ss), nil, nil, 53)
	if all.Sockets != 3 {
		t.Errorf("without pids: %d sockets, want every one on the port", all.Sockets)
	}
}

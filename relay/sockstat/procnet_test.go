package sockstat

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseProcNetUDPCaptured(t *testing.T) {
	tests := []struct {
		file string
		want []UDPSocket
	}{
		{"proc_net_udp.txt", []UDPSocket{
			{LocalAddr: "127.0.0.1", LocalPort: 58536, RemoteAddr: "0.0.0.0", State: 7, RxQueue: 212480, Inode: 23197, Drops: 134},
			{LocalAddr: "127.0.0.1", LocalPort: 50664, RemoteAddr: "127.0.0.1", RemotePort: 58536, State: 1, Inode: 24143},
		}},
		{"proc_net_udp6.txt", []UDPSocket{
			{LocalAddr: "::1", LocalPort: 57989, RemoteAddr: "::", State: 7, Inode: 24138},
			{LocalAddr: "::", LocalPort: 35674, RemoteAddr: "::", State: 7, Inode: 24142},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseProcNetUDP(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("ParseProcNetUDP: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseProcNetUDP:\ngot  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseProcNetUDPErrors(t *testing.T) {
	const hdr = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
	const good = " 1860: 0100007F:E4A8 00000000:0000 07 00000000:00033E00 00:00000000 00000000     0        0 23197 2 00000000484025bd 134\n"
	tests := []struct {
		name, in, wantErr string
	}{
		{"empty", "", "empty, want at least the header"},
		{"header only", hdr, ""},
		{"no header", good, "line 1: want the header"},
		{"few fields", hdr + " 1860: 0100007F:E4A8 00000000:0000 07\n", "line 2: want 13 fields, got 4"},
		{"bad slot", hdr + strings.Replace(good, "1860:", "1860", 1), "does not end in ':'"},
		{"short address", hdr + strings.Replace(good, "0100007F:E4A8", "01007F:E4A8", 1), "neither 8 nor 32 hex digits"},
		{"non-hex address", hdr + strings.Replace(good, "0100007F:E4A8", "0100007G:E4A8", 1), "is not hex"},
		{"bad port", hdr + strings.Replace(good, "0100007F:E4A8", "0100007F:E4A", 1), "not ADDR:PORT"},
		{"bad queues", hdr + strings.Replace(good, "00000000:00033E00", "0000000000033E00", 1), "not tx:rx"},
		{"bad rx", hdr + strings.Replace(good, "00000000:00033E00", "00000000:zz", 1), "rx_queue"},
		{"bad drops", hdr + strings.Replace(good, " 134", " -1", 1), `drops "-1"`},
		{"bad inode", hdr + strings.Replace(good, "23197", "x", 1), "inode"},
		{"bad state", hdr + strings.Replace(good, " 07 ", " 7z ", 1), "state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProcNetUDP([]byte(tt.in))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParseProcNetUDP: got %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ParseProcNetUDP: got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseSNMP(t *testing.T) {
	got, err := ParseSNMP(readTestdata(t, "proc_net_snmp.txt"))
	if err != nil {
		t.Fatalf("ParseSNMP: %v", err)
	}
	want := UDPStats{InDatagrams: 35, InErrors: 3719, OutDatagrams: 5535, RcvbufErrors: 3719}
	got.Columns = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseSNMP:\ngot  %+v\nwant %+v", got, want)
	}

	const hdr = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n"
	tests := []struct {
		name, in string
		want     UDPStats // Columns ignored
		wantErr  string
	}{
		{"reordered columns", "Udp: RcvbufErrors InErrors InDatagrams Extra\nUdp: 5 6 7 8\n",
			UDPStats{RcvbufErrors: 5, InErrors: 6, InDatagrams: 7}, ""},
		{"udplite is not udp", "UdpLite: InDatagrams InErrors RcvbufErrors\nUdpLite: 1 2 3\n", UDPStats{}, "found 0"},
		{"value line missing", hdr, UDPStats{}, "found 1"},
		{"lengths differ", hdr + "Udp: 1 2 3\n", UDPStats{}, "9 Udp column names but 3 values"},
		{"not a counter", "Udp: InDatagrams InErrors RcvbufErrors\nUdp: 1 -2 3\n", UDPStats{}, `InErrors value "-2"`},
		{"values first", "Udp: 1 2 3\nUdp: InDatagrams InErrors RcvbufErrors\n", UDPStats{}, "the header line is missing"},
		{"required missing", "Udp: InDatagrams InErrors\nUdp: 1 2\n", UDPStats{}, "no Udp column RcvbufErrors"},
		{"duplicate column", "Udp: InDatagrams InDatagrams InErrors RcvbufErrors\nUdp: 1 2 3 4\n", UDPStats{}, "InDatagrams twice"},
		{"third line", hdr + "Udp: 1 2 3 4 5 6 7 8 9\nUdp: 1\n", UDPStats{}, "line 3: a third Udp: line"},
		{"empty", "", UDPStats{}, "found 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSNMP([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSNMP: got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSNMP: %v", err)
			}
			got.Columns = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseSNMP: got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseProcNetUDP(f *testing.F) {
	f.Add(readTestdata(f, "proc_net_udp.txt"))
	f.Add(readTestdata(f, "proc_net_udp6.txt"))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, err := ParseProcNetUDP(b)
		if err != nil {
			return
		}
		for _, s := range socks {
			if s.LocalPort < 0 || s.LocalPort > 65535 || s.LocalAddr == "" || s.RemoteAddr == "" {
				t.Fatalf("ParseProcNetUDP accepted %+v", s)
			}
		}
	})
}

func FuzzParseSNMP(f *testing.F) {
	f.Add(readTestdata(f, "proc_net_snmp.txt"))
	f.Add([]byte("Udp: InDatagrams InErrors RcvbufErrors\nUdp: 1 2 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseSNMP(b)
		if err != nil {
			return
		}
		if st.Columns["RcvbufErrors"] != st.RcvbufErrors || st.Columns["InErrors"] != st.InErrors {
			t.Fatalf("ParseSNMP: named fields disagree with Columns: %+v", st)
		}
	})
}

// The ends of the captured connection (testdata/README.md).
var (
	capturedCaller  = netip.MustParseAddrPort("127.0.0.1:40000")
	capturedRelay   = netip.MustParseAddrPort("127.0.0.1:7789")
	capturedCaller6 = netip.MustParseAddrPort("[::1]:40000")
	capturedRelay6  = netip.MustParseAddrPort("[::1]:7789")
)

// ProcNetTCPSock finds either end of a loopback connection in the
// kernel's own files, in each state the caller's end goes through as it
// closes; only the established one is live.
func TestProcNetTCPSock(t *testing.T) {
	tests := []struct {
		file          string
		local, remote netip.AddrPort
		want          TCPSock
		live          bool
	}{
		{"proc_net_tcp_established.txt", capturedCaller, capturedRelay, TCPSock{TCPEstablished, 65534, 210309}, true},
		{"proc_net_tcp_established.txt", capturedRelay, capturedCaller, TCPSock{TCPEstablished, 0, 210310}, true},
		{"proc_net_tcp_finwait1.txt", capturedCaller, capturedRelay, TCPSock{TCPFinWait1, 65534, 0}, false},
		{"proc_net_tcp_finwait1.txt", capturedRelay, capturedCaller, TCPSock{TCPCloseWait, 0, 210310}, false},
		{"proc_net_tcp_timewait.txt", capturedCaller, capturedRelay, TCPSock{TCPFinWait2, 0, 0}, false},
		{"proc_net_tcp6_established.txt", capturedCaller6, capturedRelay6, TCPSock{TCPEstablished, 65534, 209316}, true},
	}
	for _, tt := range tests {
		got, found, err := ProcNetTCPSock(readTestdata(t, tt.file), tt.local, tt.remote)
		if err != nil || !found || got != tt.want || got.Live() != tt.live {
			t.Errorf("%s, %s to %s: got %+v (%s), found %v, live %v, %v; want %+v, live %v",
				tt.file, tt.local, tt.remote, got, got.StateName(), found, got.Live(), err, tt.want, tt.live)
		}
	}
	if _, found, err := ProcNetTCPSock(readTestdata(t, "proc_net_tcp_established.txt"), netip.MustParseAddrPort("127.0.0.1:40001"), capturedRelay); err != nil || found {
		t.Errorf("no such connection: found %v, %v", found, err)
	}
}

// Two lines of one pair (a socket and the timewait entry that replaced it
// while the file was read): the live one is the answer, whichever comes
// first; the timewait entry's uid 0 never is.
func TestProcNetTCPSockPrefersTheLiveLine(t *testing.T) {
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	const timewait = "   2: 0100007F:9C40 0100007F:1E6D 05 00000000:00000000 03:0000174B 00000000     0        0 0 3 00000000bc7fb062\n"
	const live = "   3: 0100007F:9C40 0100007F:1E6D 01 00000000:00000000 00:00000000 00000000 65534        0 210309 2 00000000869dc711 20 0 0 11 -1\n"
	for _, content := range []string{header + timewait + live, header + live + timewait} {
		got, found, err := ProcNetTCPSock([]byte(content), capturedCaller, capturedRelay)
		if err != nil || !found || got != (TCPSock{TCPEstablished, 65534, 210309}) {
			t.Errorf("got %+v, %v, %v; want the live line's uid 65534 and inode\n%s", got, found, err, content)
		}
	}
}

func TestProcNetTCPSockErrors(t *testing.T) {
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	tests := []struct{ name, in, wantErr string }{
		{"empty", "", "want the header"},
		{"no header", "   0: 0100007F:1E6D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 2\n", "want the header"},
		{"short line", header + "   0: 0100007F:1E6D 00000000:0000 0A\n", "line 2: want at least 10 fields"},
		{"bad address", header + "   0: 0100007G:1E6D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 2\n", "line 2: local address"},
		{"bad state", header + "   0: 0100007F:1E6D 00000000:0000 1FF 00000000:00000000 00:00000000 00000000 0 0 1 2\n", "line 2: state"},
		{"bad uid", header + "   0: 0100007F:1E6D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 -1 0 1 2\n", "line 2: uid"},
		{"bad inode", header + "   0: 0100007F:1E6D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 x 2\n", "line 2: inode"},
	}
	for _, tt := range tests {
		_, _, err := ProcNetTCPSock([]byte(tt.in), capturedCaller, capturedRelay)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func FuzzProcNetTCPSock(f *testing.F) {
	for _, name := range []string{"proc_net_tcp_established.txt", "proc_net_tcp_finwait1.txt", "proc_net_tcp_timewait.txt", "proc_net_tcp6_established.txt"} {
		f.Add(readTestdata(f, name), "127.0.0.1:40000", "127.0.0.1:7789")
	}
	f.Fuzz(func(t *testing.T, b []byte, local, remote string) {
		l, err1 := netip.ParseAddrPort(local)
		r, err2 := netip.ParseAddrPort(remote)
		if err1 != nil || err2 != nil {
			return
		}
		sock, found, err := ProcNetTCPSock(b, l, r)
		if err != nil && !strings.HasPrefix(err.Error(), "parse /proc/net/tcp") {
			t.Fatalf("ProcNetTCPSock: an error that does not say what it parsed: %v", err)
		}
		if (err != nil || !found) && sock != (TCPSock{}) {
			t.Fatalf("ProcNetTCPSock returned %+v with found %v, %v", sock, found, err)
		}
	})
}

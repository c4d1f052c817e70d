package tune

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseConf(t *testing.T) {
	const p = "/etc/sysctl.d/90-relayctl.conf"
	set := func(line int, k, v string) Setting { return Setting{Key: k, Value: v, Path: p, Line: line} }
	tests := []struct {
		name    string
		in      string
		want    []Setting
		wantErr string
	}{
		{"spaces", "net.core.rmem_max = 8388608\n", []Setting{set(1, "net.core.rmem_max", "8388608")}, ""},
		{"no spaces", "net.core.rmem_max=8388608", []Setting{set(1, "net.core.rmem_max", "8388608")}, ""},
		{"tabs and multi-value", "net.ipv4.udp_mem\t=\t1\t2  3 \n", []Setting{set(1, "net.ipv4.udp_mem", "1\t2  3")}, ""},
		{"comments and blanks", "# hash\n; semicolon\n\n   \n  # indented\nnet.core.somaxconn = 1024\n",
			[]Setting{set(6, "net.core.somaxconn", "1024")}, ""},
		{"hash inside a value is kept", "kernel.core_pattern = core#%p\n", []Setting{set(1, "kernel.core_pattern", "core#%p")}, ""},
		{"equals in value", "kernel.x = a=b\n", []Setting{set(1, "kernel.x", "a=b")}, ""},
		{"empty value", "kernel.x =\n", []Setting{set(1, "kernel.x", "")}, ""},
		{"ignore errors", "-net.core.nonexistent = 5\n - net.core.other=6\n", []Setting{
			{Key: "net.core.nonexistent", Value: "5", Path: p, Line: 1, IgnoreErrors: true},
			{Key: "net.core.other", Value: "6", Path: p, Line: 2, IgnoreErrors: true}}, ""},
		{"slash separators", "net/ipv4/udp_rmem_min = 8192\n", []Setting{set(1, "net.ipv4.udp_rmem_min", "8192")}, ""},
		{"leading slash", "/net/core/somaxconn = 1\n", []Setting{set(1, "net.core.somaxconn", "1")}, ""},
		{"slash form with a dotted interface", "net/ipv4/conf/eth0.100/rp_filter = 1\n",
			[]Setting{set(1, "net.ipv4.conf.eth0/100.rp_filter", "1")}, ""},
		{"dotted form keeps slashes", "net.ipv4.conf.eth0/100.rp_filter = 1\n",
			[]Setting{set(1, "net.ipv4.conf.eth0/100.rp_filter", "1")}, ""},
		{"glob", "net.ipv4.conf.*.rp_filter = 2\n", []Setting{set(1, "net.ipv4.conf.*.rp_filter", "2")}, ""},
		{"crlf and bom", "\xef\xbb\xbfnet.core.somaxconn = 1\r\nnet.core.optmem_max = 2\r\n",
			[]Setting{set(1, "net.core.somaxconn", "1"), set(2, "net.core.optmem_max", "2")}, ""},
		{"no newline at end", "a.b = 1", []Setting{set(1, "a.b", "1")}, ""},
		{"empty file", "", nil, ""},
		{"not an assignment", "net.core.rmem_max 8388608\n", nil, p + `:1: want key = value, got "net.core.rmem_max 8388608"`},
		{"bad line names its number", "a.b = 1\n\n# c\nbogus\n", nil, p + ":4: want key = value"},
		{"empty key", " = 5\n", nil, p + ":1: empty key before '='"},
		{"dash only", "- = 5\n", nil, p + ":1: empty key"},
		{"slash only", "/=\n", nil, p + `:1: empty key "/"`},
		{"space in key", "net core = 5\n", nil, `key "net core" contains a space`},
		{"control in value", "a.b = x\x01y\n", nil, "value of a.b contains a control character"},
		{"invalid utf8", "a.b = \xff\n", nil, "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConf(p, []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseConf: got %v, want an error containing %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "parse "+p+":") {
					t.Errorf("ParseConf error %q does not start with parse path:line", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConf: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseConf:\ngot  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseConf(f *testing.F) {
	f.Add([]byte("net.core.rmem_max = 8388608\n"))
	f.Add([]byte("# relayctl\n-net.ipv4.udp_mem=1\t2\t3\r\n; x\nnet/ipv4/conf/eth0.100/rp_filter = 1\n"))
	f.Add([]byte("net.ipv4.conf.*.rp_filter = 2\nbogus\n"))
	f.Add([]byte("\xef\xbb\xbf =\n-\n"))
	// /etc/sysctl.conf as Debian ships it (procps), abridged.
	f.Add([]byte("#\n# /etc/sysctl.conf - Configuration file for setting system variables\n" +
		"#kernel.domainname = example.com\n#net.ipv4.conf.default.rp_filter=1\n#net.ipv4.tcp_syncookies=1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		settings, err := ParseConf("/etc/sysctl.d/x.conf", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parse /etc/sysctl.d/x.conf:") {
				t.Fatalf("error without path:line: %v", err)
			}
			return
		}
		for _, s := range settings {
			if s.Key == "" || strings.ContainsAny(s.Key, " \t\n\r=") || strings.ContainsAny(s.Value, "\n\r") || s.Line < 1 {
				t.Fatalf("ParseConf accepted %+v", s)
			}
			// What we render must parse back to the same key and value.
			back, err := ParseConf("/etc/sysctl.d/x.conf", RenderDropIn(map[string]string{s.Key: s.Value}, "h"))
			if err != nil || len(back) != 1 || back[0].Key != s.Key || !Equal(back[0].Value, s.Value) {
				if !strings.HasPrefix(s.Key, "/") && !strings.HasPrefix(s.Key, "-") && !strings.HasPrefix(s.Key, "#") && !strings.HasPrefix(s.Key, ";") {
					t.Fatalf("render then parse %+v: got %+v, %v", s, back, err)
				}
			}
		}
	})
}

func files(kv ...string) []ConfFile {
	var fs []ConfFile
	for i := 0; i < len(kv); i += 2 {
		fs = append(fs, ConfFile{Path: kv[i], Content: []byte(kv[i+1])})
	}
	return fs
}

func TestDecide(t *testing.T) {
	type want struct{ key, value, path string }
	tests := []struct {
		name     string
		files    []ConfFile
		decided  []want
		problems []string // Problem.String()
		wantErr  string
	}{
		{"nothing", nil, nil, nil, ""},
		{"one file",
			files("/etc/sysctl.d/90-relayctl.conf", "net.core.rmem_max = 8388608\n"),
			[]want{{"net.core.rmem_max", "8388608", "/etc/sysctl.d/90-relayctl.conf"}}, nil, ""},
		{"sorted by basename across directories",
			files(
				"/etc/sysctl.d/05-c.conf", "net.core.somaxconn = 333\n",
				"/usr/lib/sysctl.d/20-b.conf", "net.core.somaxconn = 222\n",
				"/run/sysctl.d/10-a.conf", "net.core.somaxconn = 111\n"),
			[]want{{"net.core.somaxconn", "222", "/usr/lib/sysctl.d/20-b.conf"}},
			[]string{
				"/etc/sysctl.d/05-c.conf:1 sets net.core.somaxconn = 333 but /usr/lib/sysctl.d/20-b.conf:1 sets net.core.somaxconn = 222 later, which wins at boot",
				"/run/sysctl.d/10-a.conf:1 sets net.core.somaxconn = 111 but /usr/lib/sysctl.d/20-b.conf:1 sets net.core.somaxconn = 222 later, which wins at boot",
			}, ""},
		{"etc masks usr/lib and lib",
			files(
				"/usr/lib/sysctl.d/50-x.conf", "net.core.somaxconn = 100\n",
				"/lib/sysctl.d/50-x.conf", "net.core.somaxconn = 50\n",
				"/etc/sysctl.d/50-x.conf", "net.core.optmem_max = 30000\n"),
			[]want{{"net.core.optmem_max", "30000", "/etc/sysctl.d/50-x.conf"}},
			[]string{
				"/lib/sysctl.d/50-x.conf is masked by /etc/sysctl.d/50-x.conf: none of its settings apply",
				"/usr/lib/sysctl.d/50-x.conf is masked by /etc/sysctl.d/50-x.conf: none of its settings apply",
			}, ""},
		{"run masks usr/local/lib, usr/local/lib masks usr/lib",
			files(
				"/usr/lib/sysctl.d/50-x.conf", "a.b = 1\n",
				"/usr/local/lib/sysctl.d/50-x.conf", "a.b = 2\n",
				"/run/sysctl.d/50-x.conf", "a.b = 3\n"),
			[]want{{"a.b", "3", "/run/sysctl.d/50-x.conf"}},
			[]string{
				"/usr/lib/sysctl.d/50-x.conf is masked by /run/sysctl.d/50-x.conf: none of its settings apply",
				"/usr/local/lib/sysctl.d/50-x.conf is masked by /run/sysctl.d/50-x.conf: none of its settings apply",
			}, ""},
		{"merged /usr lists one file twice: no mask",
			files(
				"/usr/lib/sysctl.d/50-pid-max.conf", "kernel.pid_max = 4194304\n",
				"/lib/sysctl.d/50-pid-max.conf", "kernel.pid_max = 4194304\n"),
			[]want{{"kernel.pid_max", "4194304", "/usr/lib/sysctl.d/50-pid-max.conf"}}, nil, ""},
		{"sysctl.conf last",
			files(
				"/etc/sysctl.conf", "net.core.optmem_max = 20480\n",
				"/etc/sysctl.d/99-z.conf", "net.core.optmem_max = 40960\n"),
			[]want{{"net.core.optmem_max", "20480", "/etc/sysctl.conf"}},
			[]string{"/etc/sysctl.d/99-z.conf:1 sets net.core.optmem_max = 40960 but /etc/sysctl.conf:1 sets net.core.optmem_max = 20480 later, which wins at boot"}, ""},
		{"same value later is no problem, tabs or not",
			files(
				"/etc/sysctl.d/10-a.conf", "net.ipv4.udp_mem = 1 2 3\n",
				"/etc/sysctl.d/20-b.conf", "net.ipv4.udp_mem = 1\t2\t3\n"),
			[]want{{"net.ipv4.udp_mem", "1\t2\t3", "/etc/sysctl.d/20-b.conf"}}, nil, ""},
		{"twice in one file",
			files("/etc/sysctl.d/10-a.conf", "a.b = 1\na.b = 2\n"),
			[]want{{"a.b", "2", "/etc/sysctl.d/10-a.conf"}},
			[]string{"/etc/sysctl.d/10-a.conf:1 sets a.b = 1 but /etc/sysctl.d/10-a.conf:2 sets a.b = 2 later, which wins at boot"}, ""},
		{"a later glob does not beat an explicit key",
			files(
				"/etc/sysctl.d/10-a.conf", "net.ipv4.conf.lo.rp_filter = 1\n",
				"/usr/lib/sysctl.d/20-b.conf", "net.ipv4.conf.*.rp_filter = 2\n"),
			[]want{{"net.ipv4.conf.lo.rp_filter", "1", "/etc/sysctl.d/10-a.conf"}, {"net.ipv4.conf.*.rp_filter", "2", "/usr/lib/sysctl.d/20-b.conf"}},
			nil, ""},
		{"a later glob beats an earlier glob",
			files(
				"/etc/sysctl.d/10-a.conf", "net.ipv4.conf.*.rp_filter = 2\n",
				"/usr/lib/sysctl.d/20-b.conf", "net.ipv4.conf.*.rp_filter = 0\n"),
			[]want{{"net.ipv4.conf.*.rp_filter", "0", "/usr/lib/sysctl.d/20-b.conf"}},
			[]string{"/etc/sysctl.d/10-a.conf:1 sets net.ipv4.conf.*.rp_filter = 2 but /usr/lib/sysctl.d/20-b.conf:1 sets net.ipv4.conf.*.rp_filter = 0 later, which wins at boot"}, ""},
		{"bad lines are skipped and reported",
			files("/usr/lib/sysctl.d/10-vendor.conf", "bogus line\nnet.core.somaxconn = 5\n"),
			[]want{{"net.core.somaxconn", "5", "/usr/lib/sysctl.d/10-vendor.conf"}},
			[]string{`/usr/lib/sysctl.d/10-vendor.conf:1 is skipped: want key = value, got "bogus line"`}, ""},
		{"slash keys meet dotted keys",
			files(
				"/etc/sysctl.d/10-a.conf", "net/core/somaxconn = 1\n",
				"/etc/sysctl.d/20-b.conf", "net.core.somaxconn = 2\n"),
			[]want{{"net.core.somaxconn", "2", "/etc/sysctl.d/20-b.conf"}},
			[]string{"/etc/sysctl.d/10-a.conf:1 sets net.core.somaxconn = 1 but /etc/sysctl.d/20-b.conf:1 sets net.core.somaxconn = 2 later, which wins at boot"}, ""},
		{"not a conf file", files("/etc/sysctl.d/README.sysctl", "x"), nil, nil, "is not a *.conf file"},
		{"outside the directories", files("/tmp/x.conf", "a.b=1"), nil, nil, "is not a *.conf file"},
		{"nested directory", files("/etc/sysctl.d/sub/x.conf", "a.b=1"), nil, nil, "is not a *.conf file"},
		{"relative", files("etc/sysctl.d/x.conf", "a.b=1"), nil, nil, "is not a *.conf file"},
		{"bare .conf", files("/etc/sysctl.d/.conf", "a.b=1"), nil, nil, "is not a *.conf file"},
		{"twice", files("/etc/sysctl.d/x.conf", "", "/etc/sysctl.d//x.conf", ""), nil, nil, "given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decided, problems, err := Decide(tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decide: got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if len(decided) != len(tt.decided) {
				t.Errorf("Decide: got %d keys %v, want %d", len(decided), decided, len(tt.decided))
			}
			for _, w := range tt.decided {
				s, ok := decided[w.key]
				if !ok || s.Value != w.value || s.Path != w.path {
					t.Errorf("Decide[%s]: got %+v (found %v), want %s from %s", w.key, s, ok, w.value, w.path)
				}
			}
			var got []string
			for _, p := range problems {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tt.problems) {
				t.Errorf("Decide problems:\ngot  %q\nwant %q", got, tt.problems)
			}
		})
	}
}

func TestDecides(t *testing.T) {
	fs := files(
		"/etc/sysctl.d/10-a.conf", "net.ipv4.conf.lo.rp_filter = 1\nnet.ipv4.conf.*.accept_local = 1\n",
		"/usr/lib/sysctl.d/20-b.conf", "net.ipv4.conf.*.rp_filter = 2\nnet.ipv4.conf.l?.accept_local = 0\nnet.*udp_rmem_min = 9999\n")
	tests := []struct {
		key   string
		value string // "" = not decided
	}{
		{"net.ipv4.conf.lo.rp_filter", "1"},
		{"net.ipv4.conf.all.rp_filter", "2"},
		{"net.ipv4.conf.lo.accept_local", "0"},
		{"net.ipv4.conf.all.accept_local", "1"},
		{"net.ipv4.udp_rmem_min", ""}, // '*' does not cross a separator
		{"net.core.somaxconn", ""},
	}
	for _, tt := range tests {
		s, ok, err := Decides(fs, tt.key)
		if err != nil {
			t.Fatalf("Decides(%s): %v", tt.key, err)
		}
		if ok != (tt.value != "") || s.Value != tt.value {
			t.Errorf("Decides(%s): got %q (found %v), want %q", tt.key, s.Value, ok, tt.value)
		}
	}
}

func TestShadowed(t *testing.T) {
	const ours = "/etc/sysctl.d/90-relayctl.conf"
	oursSets := ConfFile{Path: ours, Content: []byte("net.core.rmem_max = 8388608\nnet.ipv4.udp_rmem_min = 8192\n")}
	tests := []struct {
		name     string
		files    []ConfFile
		key      string
		shadowed bool
		byPath   string
		byLine   int
		byValue  string
		wantErr  string
	}{
		{"alone", []ConfFile{oursSets}, "net.core.rmem_max", false, "", 0, "", ""},
		{"ours does not set the key", []ConfFile{oursSets}, "net.core.somaxconn", false, "", 0, "", ""},
		{"earlier file loses to ours",
			append(files("/usr/lib/sysctl.d/50-default.conf", "net.core.rmem_max = 212992\n"), oursSets),
			"net.core.rmem_max", false, "", 0, "", ""},
		{"later vendor file wins",
			append(files("/usr/lib/sysctl.d/99-vendor.conf", "# x\nnet.core.rmem_max = 212992\n"), oursSets),
			"net.core.rmem_max", true, "/usr/lib/sysctl.d/99-vendor.conf", 2, "212992", ""},
		{"later file with the same value still decides",
			append(files("/etc/sysctl.d/99-ops.conf", "net.core.rmem_max = 8388608\n"), oursSets),
			"net.core.rmem_max", true, "/etc/sysctl.d/99-ops.conf", 1, "8388608", ""},
		{"sysctl.conf wins",
			append(files("/etc/sysctl.conf", "net.core.rmem_max=1048576\n"), oursSets),
			"net.core.rmem_max", true, "/etc/sysctl.conf", 1, "1048576", ""},
		{"a later glob does not shadow",
			append(files("/etc/sysctl.d/99-z.conf", "net.core.*mem_max = 1\n"), oursSets),
			"net.core.rmem_max", false, "", 0, "", ""},
		{"masked by a file in run",
			[]ConfFile{{Path: "/usr/lib/sysctl.d/90-relayctl.conf", Content: oursSets.Content},
				{Path: "/run/sysctl.d/90-relayctl.conf", Content: []byte("# emptied\n")}},
			"net.core.rmem_max", true, "/run/sysctl.d/90-relayctl.conf", 0, "", ""},
		{"masked by a file that sets the key",
			[]ConfFile{{Path: "/usr/lib/sysctl.d/90-relayctl.conf", Content: oursSets.Content},
				{Path: "/etc/sysctl.d/90-relayctl.conf", Content: []byte("net.core.rmem_max = 1\n")}},
			"net.core.rmem_max", true, "/etc/sysctl.d/90-relayctl.conf", 1, "1", ""},
		{"bad input", append(files("/tmp/x.conf", ""), oursSets), "net.core.rmem_max", false, "", 0, "", "is not a *.conf file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ours
			if strings.HasPrefix(tt.name, "masked") {
				o = "/usr/lib/sysctl.d/90-relayctl.conf"
			}
			by, shadowed, err := Shadowed(tt.files, o, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Shadowed: got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Shadowed: %v", err)
			}
			if shadowed != tt.shadowed || by.Path != tt.byPath || by.Line != tt.byLine || by.Value != tt.byValue {
				t.Errorf("Shadowed(%s): got %v by %s:%d %q, want %v by %s:%d %q",
					tt.key, shadowed, by.Path, by.Line, by.Value, tt.shadowed, tt.byPath, tt.byLine, tt.byValue)
			}
		})
	}
}

func TestMasks(t *testing.T) {
	fs := files(
		"/etc/sysctl.d/90-relayctl.conf", "net.core.rmem_max = 8388608\n",
		"/usr/lib/sysctl.d/90-relayctl.conf", "net.core.rmem_max = 4194304\n",
		"/lib/sysctl.d/90-relayctl.conf", "",
		"/usr/lib/sysctl.d/50-default.conf", "",
		"/etc/sysctl.d/50-default.conf", "")
	tests := []struct {
		path     string
		masks    []string
		maskedBy string
	}{
		{"/etc/sysctl.d/90-relayctl.conf", []string{"/lib/sysctl.d/90-relayctl.conf", "/usr/lib/sysctl.d/90-relayctl.conf"}, ""},
		{"/usr/lib/sysctl.d/90-relayctl.conf", nil, "/etc/sysctl.d/90-relayctl.conf"},
		{"/etc/sysctl.d/50-default.conf", []string{"/usr/lib/sysctl.d/50-default.conf"}, ""},
		{"/etc/sysctl.d/70-absent.conf", nil, ""},
	}
	for _, tt := range tests {
		masks, by, err := Masks(fs, tt.path)
		if err != nil {
			t.Fatalf("Masks(%s): %v", tt.path, err)
		}
		if !reflect.DeepEqual(masks, tt.masks) || by != tt.maskedBy {
			t.Errorf("Masks(%s): got %q masked by %q, want %q masked by %q", tt.path, masks, by, tt.masks, tt.maskedBy)
		}
	}
	if _, _, err := Masks(files("/etc/x.conf", ""), "/etc/x.conf"); err == nil {
		t.Error("Masks(/etc/x.conf): got nil error, want one")
	}
}

func TestRenderDropIn(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]string
		header   string
		want     string
	}{
		{"sorted and normalised", map[string]string{
			"net.ipv4.udp_mem":  "1\t2   3",
			"net.core.rmem_max": " 8388608\n",
		}, "Managed by relayctl.\n\nDo not edit.", "# Managed by relayctl.\n#\n# Do not edit.\n" +
			"net.core.rmem_max = 8388608\nnet.ipv4.udp_mem = 1 2 3\n"},
		{"no header", map[string]string{"a.b": "1"}, "", "a.b = 1\n"},
		{"empty", nil, "h", "# h\n"},
		{"newline in a value stays one line", map[string]string{"a.b": "1\nc.d = 2"}, "", "a.b = 1 c.d = 2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(RenderDropIn(tt.settings, tt.header))
			if got != tt.want {
				t.Errorf("RenderDropIn:\ngot  %q\nwant %q", got, tt.want)
			}
			// Rendering is deterministic and parses back.
			for range 5 {
				if again := string(RenderDropIn(tt.settings, tt.header)); again != got {
					t.Fatalf("RenderDropIn not deterministic: %q then %q", got, again)
				}
			}
			back, err := ParseConf("/etc/sysctl.d/90-relayctl.conf", []byte(got))
			if err != nil || len(back) != len(tt.settings) {
				t.Fatalf("parse rendered drop-in: got %d settings, %v; want %d", len(back), err, len(tt.settings))
			}
			for _, s := range back {
				if !Equal(s.Value, tt.settings[s.Key]) {
					t.Errorf("parse rendered %s: got %q, want %q", s.Key, s.Value, Normalize(tt.settings[s.Key]))
				}
			}
		})
	}
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte("net.core.rmem_max = 8388608\n"), []byte("net.core.rmem_max = 212992\n"), []byte("net.ipv4.conf.*.rp_filter = 2\n"))
	f.Add([]byte("bogus\n-a.b=1\n"), []byte("a/b = 2\n"), []byte("a.b = 3\n"))
	f.Fuzz(func(t *testing.T, ours, masked, later []byte) {
		fs := []ConfFile{
			{Path: "/etc/sysctl.d/50-a.conf", Content: ours},
			{Path: "/usr/lib/sysctl.d/50-a.conf", Content: masked},
			{Path: "/usr/lib/sysctl.d/60-b.conf", Content: later},
		}
		decided, problems, err := Decide(fs)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		for k, s := range decided {
			if s.Path == "/usr/lib/sysctl.d/50-a.conf" || s.Key != k {
				t.Fatalf("Decide[%s] = %+v: from a masked file or under another key", k, s)
			}
			by, shadowed, err := Shadowed(fs, "/etc/sysctl.d/50-a.conf", k)
			if err != nil {
				t.Fatalf("Shadowed: %v", err)
			}
			if shadowed && by.Path != "/usr/lib/sysctl.d/60-b.conf" {
				t.Fatalf("Shadowed(%s) by %+v, want only the later file to shadow", k, by)
			}
		}
		masks := 0
		for _, p := range problems {
			if p.Kind == Masked {
				masks++
			}
		}
		if masks != 1 {
			t.Fatalf("Decide: got %d masks, want 1", masks)
		}
	})
}

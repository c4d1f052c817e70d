package inventory

import (
	"reflect"
	"strconv"
	"testing"
)

// The expected values below are Python 3.11's own answers
// (shlex.split(s, comments=True) and ast.literal_eval), which Ansible's INI
// plugin uses.

func TestShlexSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  error
	}{
		{in: "relay-1", want: []string{"relay-1"}},
		{in: "relay-1 a=1 b=2", want: []string{"relay-1", "a=1", "b=2"}},
		{in: `h x="a b" # c`, want: []string{"h", "x=a b"}},
		{in: "a#b c", want: []string{"a"}},
		{in: `h x='a#b'`, want: []string{"h", "x=a#b"}},
		{in: `h x=a\ b`, want: []string{"h", "x=a b"}},
		{in: `h "x=a\nb"`, want: []string{"h", `x=a\nb`}},
		{in: `h "x=a\"b"`, want: []string{"h", `x=a"b`}},
		{in: `h x='a\b'`, want: []string{"h", `x=a\b`}},
		{in: `h x=""`, want: []string{"h", "x="}},
		{in: `h ''`, want: []string{"h", ""}},
		{in: "h\tx=1", want: []string{"h", "x=1"}},
		{in: `h x="a"b'c'`, want: []string{"h", "x=abc"}},
		{in: `h x="unclosed`, err: errNoClosingQuote},
		{in: `h x=\`, err: errNoEscaped},
	}
	for _, tt := range tests {
		got, err := shlexSplit(tt.in)
		if err != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: got %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestPyValue(t *testing.T) {
	tests := []struct {
		in   string
		kind Kind
		text string // for Float, compared as a number
	}{
		{"010", String, "010"}, // a syntax error in Python 3, so the text
		{"0x10", Int, "16"},
		{"0o17", Int, "15"},
		{"0b101", Int, "5"},
		{"1_000", Int, "1000"},
		{"True", Bool, "true"},
		{"true", String, "true"},
		{"False", Bool, "false"},
		{"None", Null, ""},
		{"-5", Int, "-5"},
		{"- 5", Int, "-5"},
		{"+7", Int, "7"},
		{"-0", Int, "0"},
		{"1e3", Float, "1000"},
		{"1.5", Float, "1.5"},
		{".5", Float, "0.5"},
		{"5.", Float, "5"},
		{"1_0.5", Float, "10.5"},
		{`"a" "b"`, String, "ab"},
		{"'a'", String, "a"},
		{`'a\tb'`, String, "a\tb"},
		{`'\x41\u00e9'`, String, "Aé"},
		{`'a\qb'`, String, `a\qb`},
		{"[a]", String, "[a]"},
		{"[1,2", String, "[1,2"},
		{"[1, 2]", Complex, ""},
		{`{"a": 1}`, Complex, ""},
		{"{a:1}", String, "{a:1}"},
		{" 5", Int, "5"},
		{"5 # c", Int, "5"},
		{"'x' # c", String, "x"},
		{"bare # c", String, "bare # c"},
		{"inf", String, "inf"},
		{"1j", Complex, ""},
		{"12abc", String, "12abc"},
		{"00", Int, "0"},
		{"0_0", Int, "0"},
		{"1__0", String, "1__0"},
		{"-True", String, "-True"},
		{`"a`, String, `"a`},
		{"a=b", String, "a=b"},
		{"2222", Int, "2222"},
		{"10.0.0.5", String, "10.0.0.5"},
		{"2001:db8::1", String, "2001:db8::1"},
		// Python reads these as the string x and the integer 5; relayctl
		// does not follow prefixes, triple quotes or parentheses, and says
		// Complex so that no host setting can come from them.
		{`r"x"`, Complex, ""},
		{`"""x"""`, Complex, ""},
		{"(5)", Complex, ""},
	}
	for _, tt := range tests {
		got := pyValue(tt.in, 3)
		ok := got.Kind == tt.kind && got.Line == 3
		if ok && tt.kind == Float {
			a, _ := strconv.ParseFloat(got.Text, 64)
			b, _ := strconv.ParseFloat(tt.text, 64)
			ok = a == b
		} else if ok {
			ok = got.Text == tt.text
		}
		if !ok {
			t.Errorf("%q: got %s %q, want %s %q", tt.in, got.Kind, got.Text, tt.kind, tt.text)
		}
	}
}

func FuzzPyValue(f *testing.F) {
	for _, s := range []string{"010", "'a\\x41'", "[1, {2: (3,)}]", "- 5 # c", `"a" 'b'`, "0x_1f", "1e-3j"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := pyValue(s, 1)
		if v.Kind == String && v.Text != s {
			// a string literal's text is its decoded content, which is
			// never longer than the source
			if len(v.Text) > len(s) {
				t.Fatalf("%q: decoded %q is longer than the source", s, v.Text)
			}
		}
		if v.Kind == Int {
			if _, ok := pyInt(v.Text); !ok {
				t.Fatalf("%q: integer text %q is not an integer", s, v.Text)
			}
		}
	})
}

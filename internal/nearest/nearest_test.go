package nearest

import "testing"

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"ash", "ash", 3, 0},
		{"ahs", "ash", 3, 1}, // a swap is one edit
		{"soka", "soak", 3, 1},
		{"canry", "canary", 3, 1},
		{"", "abc", 5, 3},
		{"abcdef", "a", 3, 3}, // at the limit: the limit
		{"kitten", "sitting", 9, 3},
		{"größe", "grösse", 3, 2}, // runes, not bytes
	} {
		if got := Distance(tt.a, tt.b, tt.limit); got != tt.want {
			t.Errorf("Distance(%q, %q, %d) = %d, want %d", tt.a, tt.b, tt.limit, got, tt.want)
		}
	}
}

func TestWord(t *testing.T) {
	words := []string{"canary", "all", "rollback", "stop", "out", "output"}
	for _, tt := range []struct{ typed, want string }{
		{"canry", "canary"},
		{"rolback", "rollback"},
		{"outt", "out"}, // one edit from out, two from output
		{"stp", "stop"},
		{"al", ""},  // one edit of two letters is too many
		{"xyz", ""}, // nothing near
		{"", ""},
	} {
		if got := Word(tt.typed, words); got != tt.want {
			t.Errorf("Word(%q) = %q, want %q", tt.typed, got, tt.want)
		}
	}
}

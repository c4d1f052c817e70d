package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// The man page names every command, with its usage line and description.
func TestManMentionsEveryCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"relayctl", "man"}, nil, &out, &errb); code != 0 {
		t.Fatalf("man: exit %d: %s", code, errb.String())
	}
	man := out.String()
	for _, c := range commands(&env{stdout: io.Discard, stderr: io.Discard}) {
		head := ".SS relayctl " + c.Name
		if !strings.Contains(man, head) {
			t.Errorf("the man page has no %q", head)
		}
		if c.Description != "" {
			first := strings.SplitN(c.Description, "\n", 2)[0]
			if !strings.Contains(man, strings.ReplaceAll(first, "-", `\-`)) && !strings.Contains(man, first) {
				t.Errorf("the man page lacks %s's description (%q)", c.Name, first)
			}
		}
	}
}

func TestCompletionRequest(t *testing.T) {
	tests := []struct {
		args          []string
		request, safe bool
	}{
		{[]string{"relayctl", "plan"}, false, true},
		{[]string{"relayctl", completeFlag}, true, true},
		{[]string{"relayctl", "apply", "x.plan", "--js", completeFlag}, true, true},
		{[]string{"relayctl", "facts", "--", "h1", completeFlag}, true, false},
		{[]string{"relayctl"}, false, true},
	}
	for _, tt := range tests {
		r, s := completionRequest(tt.args)
		if r != tt.request || s != tt.safe {
			t.Errorf("completionRequest(%q) = %v, %v; want %v, %v", tt.args, r, s, tt.request, tt.safe)
		}
	}
}

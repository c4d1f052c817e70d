package plans

import (
	"strings"
	"testing"
)

// A program given code in its words is told apart from one given a script
// or its own arguments.
func TestInlineCode(t *testing.T) {
	for _, tt := range []struct {
		argv string // words, split on spaces
		want string // "" for none
	}{
		{"sh -c x", "sh -c runs its argument as code"},
		{"/bin/bash -ec x", "bash -c runs its argument as code"},
		{"bash -o pipefail -c x", "bash -c runs its argument as code"},
		{"bash --norc --command x", "bash --command runs its argument as code"},
		{"ksh93 -c x", "ksh93 -c runs its argument as code"},
		{"busybox sh -c x", "sh -c runs its argument as code"},
		{"python3.11 -c x", "python3.11 -c runs its argument as code"},
		{"python3 -Ic x", "python3 -c runs its argument as code"},
		{"perl -le x", "perl -e runs its argument as code"},
		{"ruby -e x", "ruby -e runs its argument as code"},
		{"node --eval=x", "node --eval runs its argument as code"},
		{"node -p x", "node -p runs its argument as code"},
		{"php -r x", "php -r runs its argument as code"},
		{"lua5.4 -e x", "lua5.4 -e runs its argument as code"},
		{"awk BEGIN{system(x)}", "awk runs its first operand, BEGIN{system(x)}, as code"},
		{"gawk -v a=1 -- BEGIN{}", "gawk runs its first operand, BEGIN{}, as code"},
		{"pwsh -NoProfile -Command x", "pwsh -Command runs its argument as code"},
		{"deno eval x", "deno eval runs its argument as code"},
		{"env -i PATH=/bin sh -c x", "sh -c runs its argument as code"},
		{"env -S sh_-c_x", "env -S splits a string into a command as a shell does"},
		{"nice -n 5 timeout 10 setsid nohup sh -c x", "sh -c runs its argument as code"},
		// What is not code in the words: a script and its own arguments.
		{"sh inventory/hosts.sh --list", ""},
		{"sh inventory/hosts.sh -c config", ""},
		{"bash -e inventory/hosts.sh", ""},
		{"python3 inventory/ec2.py --list", ""},
		{"python3 -m inventory_tool --list", ""},
		{"awk -f inventory/hosts.awk inventory/hosts.txt", ""},
		{"perl -w inventory/hosts.pl", ""},
		{"ansible-inventory -i inventory/aws_ec2.yml --list", ""},
		{"inventory/ec2.py -c x", ""},
		{"env A=1 ansible-inventory --list", ""},
		{"pwsh -File inventory/hosts.ps1", ""},
		{"deno run inventory/hosts.ts", ""},
	} {
		if got := InlineCode(strings.Fields(tt.argv)); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.argv, got, tt.want)
		}
	}
}

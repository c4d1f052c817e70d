package tune

import (
	"strings"
	"testing"
)

func TestRunsProgram(t *testing.T) {
	for _, tt := range []struct {
		key, value string
		want       string // "" not a program
	}{
		{"kernel.core_pattern", "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", "runs /usr/lib/systemd/systemd-coredump as root at every core dump"},
		{"kernel.core_pattern", "@/run/coredump.socket", "sends every core dump, root processes' included, to whatever listens on the socket /run/coredump.socket"},
		{"kernel.core_pattern", "@@/run/coredump.socket", "the socket /run/coredump.socket"},
		{"kernel.core_pattern", "core", ""},
		{"kernel.core_pattern", "/var/crash/core.%e.%p", ""},
		{"kernel.core_pattern", "core|x", ""},
		{"kernel.modprobe", "/sbin/modprobe", "runs /sbin/modprobe as root whenever it wants a module"},
		{"kernel.hotplug", "/sbin/hotplug", "runs /sbin/hotplug as root at every device event"},
		{"kernel.poweroff_cmd", "/sbin/poweroff", "runs /sbin/poweroff as root for an orderly power-off"},
		{"kernel.usermodehelper.bset", "4294967295 511", "capabilities of every program the kernel runs as root"},
		{"kernel.usermodehelper.inheritable", "4294967295 511", "capabilities"},
		{"fs.binfmt_misc.register", ":x:E::x::/tmp/x:C", "binfmt_misc interpreter"},
		{"fs.binfmt_misc.status", "1", "binfmt_misc"},
		{"fs.binfmt_misc.python3", "1", "binfmt_misc"},
		{"Kernel.Modprobe", "/tmp/x", "runs /tmp/x"},
		{"kernel.core_pipe_limit", "4", ""},
		{"kernel.core_uses_pid", "1", ""},
		{"net.core.rmem_max", "8388608", ""},
		{"kernel.modprobe_x", "/tmp/x", ""},
	} {
		why, ok := RunsProgram(tt.key, tt.value)
		if ok != (tt.want != "") || !strings.Contains(why, tt.want) {
			t.Errorf("RunsProgram(%q, %q) = %q, %v; want %q", tt.key, tt.value, why, ok, tt.want)
		}
	}
}

package tune

import (
	"fmt"
	"strings"
)

// Sysctls that make the kernel run a program as root, or decide what such
// a program may do. Writing one is root on the host for whoever wrote the
// spec, at every crash, module request, device event or shutdown from then
// on (and at every boot, through the drop-in), so a spec may set one only
// when it says so in so many words (plans: unsafe.sysctls_that_run_programs).
// From the kernel's Documentation/admin-guide/sysctl/kernel.rst and
// binfmt-misc.rst, and fs/coredump.c, as of Linux 6.18.

// RunsProgram says whether setting key to value makes the kernel run a
// program as root (or hand it what a crashing process held), and why, in
// words for a review. value is as Normalize leaves it.
func RunsProgram(key, value string) (why string, ok bool) {
	k := strings.ToLower(key) // /proc/sys is case-sensitive; be safe anyway
	switch {
	case k == "kernel.core_pattern" && strings.HasPrefix(value, "|"):
		return fmt.Sprintf("the kernel runs %s as root at every core dump, with the crashing process's memory on its stdin", firstWord(value[1:])), true
	case k == "kernel.core_pattern" && strings.HasPrefix(value, "@"):
		return fmt.Sprintf("the kernel sends every core dump, root processes' included, to whatever listens on the socket %s", firstWord(strings.TrimLeft(value, "@"))), true
	case k == "kernel.modprobe":
		return fmt.Sprintf("the kernel runs %s as root whenever it wants a module (any user can make it ask, e.g. for a socket family)", firstWord(value)), true
	case k == "kernel.hotplug":
		return fmt.Sprintf("the kernel runs %s as root at every device event (the uevent helper)", firstWord(value)), true
	case k == "kernel.poweroff_cmd":
		return fmt.Sprintf("the kernel runs %s as root for an orderly power-off (a critical temperature, a power button)", firstWord(value)), true
	case strings.HasPrefix(k, "kernel.usermodehelper."):
		return "decides the capabilities of every program the kernel runs as root (core dump pipe, modprobe, hotplug, power-off)", true
	case strings.HasPrefix(k, "fs.binfmt_misc."):
		return "registers or switches a binfmt_misc interpreter: the kernel runs it for every matching program, setuid ones as root", true
	}
	return "", false
}

// RootProgramKeys are the keys RunsProgram knows, for docs and messages;
// a trailing * is any key below.
var RootProgramKeys = []string{"kernel.core_pattern (| or @ first)", "kernel.modprobe", "kernel.hotplug", "kernel.poweroff_cmd", "kernel.usermodehelper.*", "fs.binfmt_misc.*"}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "(nothing)"
}

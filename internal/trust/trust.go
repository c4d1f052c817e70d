// Package trust says whether a local file relayctl is about to trust (an
// allowed_signers file, an inventory program) can be changed by someone
// other than root or the user running relayctl.
package trust

import (
	"fmt"
	"os"
	"syscall"
)

// Owned: p belongs to root or to the user running relayctl, and no one
// else may write it (a folder with the sticky bit, such as /tmp, keeps
// others from replacing what is in it).
func Owned(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cannot tell who owns %s", p)
	}
	if sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, neither root nor you", p, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 && !(st.IsDir() && st.Mode()&os.ModeSticky != 0) {
		return fmt.Errorf("%s is writable by others (mode %04o)", p, st.Mode().Perm())
	}
	return nil
}

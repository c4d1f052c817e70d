package fdstore

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// maxListenFDs bounds LISTEN_FDS: systemd passes the store's descriptors
// and those of socket units, far fewer than this.
const maxListenFDs = 4096

// File is a descriptor systemd passed at start, with its FDNAME.
type File struct {
	Name string
	FD   int
}

// Inherited returns the descriptors systemd passed to process pid, as
// sd_listen_fds_with_names(3) reads them: LISTEN_PID must be pid (else
// they were meant for another process and none is returned), LISTEN_FDS
// of them from descriptor 3 on, named by the colon-separated
// LISTEN_FDNAMES ("unknown" each when it is unset). Each is made
// close-on-exec. A malformed variable is an error and returns none: the
// caller then uses nothing systemd passed.
func Inherited(environ []string, pid int) ([]File, error) {
	p, ok := lookup(environ, "LISTEN_PID")
	if !ok {
		return nil, nil
	}
	if p != strconv.Itoa(pid) {
		return nil, nil
	}
	v, _ := lookup(environ, "LISTEN_FDS")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxListenFDs {
		return nil, fmt.Errorf("LISTEN_FDS=%q: want a count from 0 to %d", v, maxListenFDs)
	}
	names := make([]string, n)
	if v, ok := lookup(environ, "LISTEN_FDNAMES"); ok && n > 0 {
		names = strings.Split(v, ":")
		if len(names) != n {
			return nil, fmt.Errorf("LISTEN_FDNAMES has %d names for LISTEN_FDS=%d", len(names), n)
		}
	} else {
		for i := range names {
			names[i] = "unknown"
		}
	}
	files := make([]File, 0, n)
	for i, name := range names {
		fd := listenFDsStart + i
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return nil, fmt.Errorf("LISTEN_FDS=%d: descriptor %d (%s): %w", n, fd, name, err)
		}
		unix.CloseOnExec(fd)
		files = append(files, File{Name: name, FD: fd})
	}
	return files, nil
}

// Inventory is what systemd passed, sorted by what relayd does with it.
type Inventory struct {
	UDP    []File // named NameUDP: the socket, if one fits the config
	States []File // named NameStateA or NameStateB
	Other  []File // any other name: relayd removes them from the store
}

// Sort sorts files by name, keeping their order within each group.
func Sort(files []File) Inventory {
	var inv Inventory
	for _, f := range files {
		switch f.Name {
		case NameUDP:
			inv.UDP = append(inv.UDP, f)
		case NameStateA, NameStateB:
			inv.States = append(inv.States, f)
		default:
			inv.Other = append(inv.Other, f)
		}
	}
	return inv
}

// Names lists the distinct names of files, in order.
func Names(files []File) []string {
	var names []string
	seen := map[string]bool{}
	for _, f := range files {
		if !seen[f.Name] {
			seen[f.Name] = true
			names = append(names, f.Name)
		}
	}
	return names
}

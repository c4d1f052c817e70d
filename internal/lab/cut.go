package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CutSessions kills every SSH session on the host, and everything under it,
// as an OOM kill of the session or a logind session teardown would: what a
// lost connection costs a host at its worst. It returns how many processes
// it killed.
//
// On a plain host a session is the per-connection sshd (a child of the
// listening one), every process under it, and every process of its
// sessions (sshd starts the session's command in a session of its own):
// killed until none is left, so a fork in flight is caught too. On a
// systemd host with logind sessions (HostOptions.Logind) each session is
// its scope's cgroup (user.slice/user-UID.slice/session-N.scope), killed
// whole through cgroup.kill as systemd's OOM or logind's teardown kills it,
// setsid or not; without logind, the sessions share ssh.service's cgroup,
// whose every process but the listening sshd is killed.
func (h *Host) CutSessions() (int, error) {
	if h.Kind == KindSystemd {
		return h.cutSystemdSessions()
	}
	n := 0
	for range 20 {
		victims := sessionProcs(h.SSHDPID)
		if len(victims) == 0 {
			return n, nil
		}
		for _, pid := range victims {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n, fmt.Errorf("%s: sessions still running after 20 rounds of kills", h.Name)
}

// sessionProcs are the SSH sessions of the listening sshd listener: its
// children, their descendants, and every process in their sessions.
func sessionProcs(listener int) []int {
	type proc struct{ ppid, sid int }
	procs := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// PID (COMM) STATE PPID PGRP SESSION ...
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		sid, _ := strconv.Atoi(f[3])
		procs[pid] = proc{ppid, sid}
	}
	var tree []int
	for pid, p := range procs {
		if p.ppid == listener {
			tree = append(tree, pid)
		}
	}
	for grew := true; grew; {
		grew = false
		for pid, p := range procs {
			if !slices.Contains(tree, pid) && slices.Contains(tree, p.ppid) {
				tree, grew = append(tree, pid), true
			}
		}
	}
	sessions := map[int]bool{}
	for _, pid := range tree {
		if s := procs[pid].sid; s != procs[listener].sid {
			sessions[s] = true
		}
	}
	for pid, p := range procs {
		if sessions[p.sid] && !slices.Contains(tree, pid) {
			tree = append(tree, pid)
		}
	}
	return tree
}

// cutSystemdSessions kills a systemd host's sessions: each logind session
// scope through cgroup.kill, else ssh.service's processes but its main one.
func (h *Host) cutSystemdSessions() (int, error) {
	scopes, _ := filepath.Glob(filepath.Join(h.Cgroup, "user.slice", "user-*.slice", "session-*.scope"))
	n := 0
	for _, s := range scopes {
		n += len(cgroupProcs(s))
		if err := os.WriteFile(filepath.Join(s, "cgroup.kill"), []byte("1"), 0); err != nil {
			return n, fmt.Errorf("%s: kill %s: %w", h.Name, filepath.Base(s), err)
		}
	}
	if len(scopes) > 0 {
		return n, nil
	}
	for range 20 {
		var victims []int
		for _, pid := range cgroupProcs(filepath.Join(h.Cgroup, "system.slice", "ssh.service")) {
			if pid != h.SSHDPID {
				victims = append(victims, pid)
			}
		}
		if len(victims) == 0 {
			return n, nil
		}
		for _, pid := range victims {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n, fmt.Errorf("%s: ssh.service's sessions still running after 20 rounds of kills", h.Name)
}

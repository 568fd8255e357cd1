//go:build unix

package interop

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own, so that
// killTree can end it without touching the test's group.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killTree SIGKILLs pid and every process descended from it, and each
// process group one of them leads: Playwright starts Chromium detached, in
// a group of its own, so the driver's group alone would miss it. Nothing
// gets a chance to close its connections, as when a browser crashes.
func killTree(pid int) error {
	procs := descendants(pid)
	self := syscall.Getpgrp()
	var errs []error
	for p := range procs {
		// Only groups led by one of ours, never the test's own.
		if g, err := syscall.Getpgid(p); err == nil && g != self && procs[g] {
			if err := syscall.Kill(-g, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	for p := range procs {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// descendants returns pid and every process descended from it, from the
// parent links in /proc.
func descendants(pid int) map[int]bool {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // it exited meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(b[i+1:])
		if len(fields) < 2 {
			continue
		}
		p, err1 := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		ppid, err2 := strconv.Atoi(string(fields[1]))
		if err1 == nil && err2 == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	procs := map[int]bool{pid: true}
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			if !procs[c] {
				procs[c] = true
				queue = append(queue, c)
			}
		}
	}
	return procs
}

// canKillTree reports whether killTree works here.
func canKillTree() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

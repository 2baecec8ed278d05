//go:build !linux

package testutil

import "syscall"

// sysProcAttr returns the process attributes for a PostgreSQL program run as
// user u (nil: the current user). Outside Linux there is no parent-death
// signal, and running as another user is not supported (nil is returned).
func sysProcAttr(u *osUser, deathSig bool) *syscall.SysProcAttr {
	if u != nil {
		return nil
	}
	return &syscall.SysProcAttr{}
}

// processAlive reports whether a process with the given PID may exist. Outside
// Linux it conservatively says yes, so stale directories are left alone.
func processAlive(pid int) bool { return true }

// removeStaleSharedMemory is a no-op outside Linux (stale directories are
// never removed there).
func removeStaleSharedMemory(dataDir string) {}

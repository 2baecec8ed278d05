package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr returns the process attributes for a PostgreSQL program run as
// user u (nil: the current user). With deathSig, the kernel SIGKILLs the
// child when the thread that started it dies (see server).
//
// The credentials are switched before the parent-death signal is set up
// (syscall.forkAndExecInChild does it in this order), which matters because
// the kernel clears the parent-death signal when credentials change.
func sysProcAttr(u *osUser, deathSig bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if deathSig {
		attr.Pdeathsig = syscall.SIGKILL
	}
	if u != nil {
		attr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid}
	}
	return attr
}

// processAlive reports whether a process with the given PID exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeStaleSharedMemory removes the small System V shared memory segment
// of a killed postmaster whose data directory is dataDir. A postmaster that
// is SIGKILLed cannot remove it; the next postmaster on the same data
// directory would, but our data directories are never reused. The segment's
// key and id are on line 7 of postmaster.pid; it is removed only if it still
// has that key and nothing is attached to it.
func removeStaleSharedMemory(dataDir string) {
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 7 {
		return
	}
	fields := strings.Fields(lines[6])
	if len(fields) != 2 {
		return
	}
	key, err1 := strconv.ParseInt(fields[0], 10, 64)
	id, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		return
	}
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err != nil {
		return
	}
	if int64(uint32(desc.Perm.Key)) != key || desc.Nattch != 0 {
		return
	}
	_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
}

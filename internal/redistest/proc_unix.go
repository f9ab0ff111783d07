//go:build unix && !linux

package redistest

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts redis-server in its own process group. This system has
// no parent-death signal: a server outlives a test binary that dies
// without running Main or its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// spawn starts cmd.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }

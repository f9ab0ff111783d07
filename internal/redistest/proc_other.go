//go:build !unix

package redistest

import (
	"os"
	"os/exec"
	"syscall"
)

// sysProcAttr has nothing to set on this system: a server outlives a test
// binary that dies without running Main or its cleanups.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// spawn starts cmd.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }

// terminate stops redis-server; this system has no SIGTERM, so it is not
// graceful, and Stop reports the exit status of the killed process.
func terminate(p *os.Process) error { return p.Kill() }

// killGroup kills redis-server.
func killGroup(p *os.Process) { _ = p.Kill() }

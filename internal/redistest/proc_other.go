//go:build !unix

package redistest

import (
	"os"
	"os/exec"
)

// StartProcess starts cmd. This system has no process groups, and no way
// to tie the child's life to this process's.
func StartProcess(cmd *exec.Cmd) error { return cmd.Start() }

// terminate kills redis-server: this system has no SIGTERM, so Stop
// reports the exit status of the killed process.
func terminate(p *os.Process) error { return p.Kill() }

// KillProcess kills a process started by StartProcess.
func KillProcess(p *os.Process) { _ = p.Kill() }

//go:build unix && !linux

package redistest

import (
	"os/exec"
	"syscall"
)

// StartProcess starts cmd in a process group of its own (so that a ^C in
// the terminal reaches only this process, and KillProcess kills the whole
// group). Only Linux can also tie the child's life to this process's.
func StartProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}

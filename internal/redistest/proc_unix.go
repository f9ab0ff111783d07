//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// terminate asks redis-server to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// KillProcess SIGKILLs a process started by StartProcess and its process
// group (for redis-server, a child forked for BGSAVE or an AOF rewrite).
// The process must not have been reaped yet.
func KillProcess(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

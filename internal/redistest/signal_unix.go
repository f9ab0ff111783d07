//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// terminate asks redis-server to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// killGroup SIGKILLs redis-server and its process group (a child forked
// for BGSAVE or an AOF rewrite). The caller has checked that the process
// has not been reaped, so the group is still the server's.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

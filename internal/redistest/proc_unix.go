//go:build unix

package redistest

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// StartProcess starts cmd in a process group of its own (so that a ^C in
// the terminal reaches only this process, and KillProcess kills the whole
// group) and, on Linux, has the kernel SIGKILL it when this process exits,
// however it exits. It starts every redis-server, and bench/cmd/fleet's
// children.
func StartProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(cmd.SysProcAttr)
	errc := make(chan error)
	spawner() <- func() { errc <- cmd.Start() }
	return <-errc
}

// Linux sends Pdeathsig when the thread that forked the child exits, not
// the process, and the Go runtime does end threads. So every child is
// forked from one goroutine that locks its thread and never returns.
var spawner = sync.OnceValue(func() chan<- func() {
	starts := make(chan func())
	go spawnLoop(starts)
	return starts
})

// spawnLoop runs each start from a thread it never leaves; it runs until
// the process exits (Main's leak check expects it).
func spawnLoop(starts <-chan func()) {
	runtime.LockOSThread() // never unlocked
	for start := range starts {
		start()
	}
}

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

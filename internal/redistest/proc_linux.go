package redistest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr puts redis-server in its own process group and has the
// kernel SIGKILL it when its parent goes away.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Linux sends Pdeathsig when the *thread* that forked the child exits, not
// the process, and the Go runtime does end threads (one whose goroutine
// exits while locked to it). So every server is forked from one goroutine
// that locks its thread and never returns: the signal then comes only when
// the test binary itself exits.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd *exec.Cmd
	err chan<- error
}

// spawn starts cmd from the spawner's thread.
func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go spawnLoop(spawner.reqs)
	})
	errc := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd: cmd, err: errc}
	return <-errc
}

// spawnLoop forks each requested command from a thread it never leaves; it
// runs until the process exits (Main's leak check expects it).
func spawnLoop(reqs <-chan spawnRequest) {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the process
	for r := range reqs {
		r.err <- r.cmd.Start()
	}
}

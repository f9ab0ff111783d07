package main

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// childAttr puts a child in its own process group and has the kernel
// SIGKILL it when the benchmark goes away, even by SIGKILL.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Linux sends Pdeathsig when the thread that forked the child ends, not
// the process, and the Go runtime may end threads. So every child is
// forked from one goroutine that stays locked to its thread for the life
// of the process (as internal/redistest does for redis-server).
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
		go func() {
			runtime.LockOSThread() // never unlocked
			for r := range spawner.reqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd: cmd, err: errc}
	return <-errc
}

// killGroup kills the child's whole process group.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

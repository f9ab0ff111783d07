package main

import "syscall"

// childAttr makes a worker process die with the benchmark, even when the
// benchmark is killed without a chance to stop it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

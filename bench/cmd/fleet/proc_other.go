//go:build !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// childAttr: only Linux can tie a child's life to ours; elsewhere the
// children stop by themselves (-life) or by the deferred kills.
func childAttr() *syscall.SysProcAttr { return nil }

// spawn starts cmd.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }

// killGroup kills the child.
func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

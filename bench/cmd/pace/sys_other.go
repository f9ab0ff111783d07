//go:build !linux

package main

import "syscall"

// childAttr: only Linux can tie a child's life to ours; elsewhere the
// workers stop by themselves at the end of their run.
func childAttr() *syscall.SysProcAttr { return nil }

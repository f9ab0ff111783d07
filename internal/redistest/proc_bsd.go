//go:build unix && !linux

package redistest

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {} // only Linux has it

//go:build unix

package sysstat

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time, user plus system, that this process
// has used so far; 0 when the system does not say.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

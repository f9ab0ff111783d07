//go:build unix

package sysstat

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time, user plus system, that this process
// has used so far; 0 when the system does not say.
func ProcessCPU() time.Duration {
	u := ProcessUsage()
	return u.User + u.System
}

// ProcessUsage returns getrusage(RUSAGE_SELF): this process's CPU time so
// far, split into user and system, and its context switches. All zero when
// the system does not say.
func ProcessUsage() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{
		User:      time.Duration(ru.Utime.Nano()),
		System:    time.Duration(ru.Stime.Nano()),
		Switches:  int64(ru.Nvcsw),
		Preempted: int64(ru.Nivcsw),
	}
}

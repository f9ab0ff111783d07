//go:build !unix

package sysstat

import "time"

// ProcessCPU is not measured on this system: it returns 0, and the
// reports show 0 for this process's CPU.
func ProcessCPU() time.Duration { return 0 }

// ProcessUsage is not measured on this system: it returns zeros.
func ProcessUsage() Usage { return Usage{} }

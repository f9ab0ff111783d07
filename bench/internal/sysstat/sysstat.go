// Package sysstat reads what the benchmark commands report about the
// machine they ran on: this process's CPU time and context switches, and
// the load average.
package sysstat

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// LoadAvg returns the 1-, 5- and 15-minute load averages of
// /proc/loadavg. ok is false where that file is missing or unreadable
// (systems other than Linux).
func LoadAvg() (avg [3]float64, ok bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return avg, false
	}
	return parseLoadAvg(string(b))
}

// parseLoadAvg reads the first three fields of a /proc/loadavg line.
func parseLoadAvg(s string) (avg [3]float64, ok bool) {
	f := strings.Fields(s)
	if len(f) < len(avg) {
		return avg, false
	}
	for i := range avg {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return [3]float64{}, false
		}
		avg[i] = v
	}
	return avg, true
}

// Usage is a process's CPU time and context switches, so far or (from
// Sub) over a run.
type Usage struct {
	User, System time.Duration
	// Switches counts the times a thread of the process gave up the CPU
	// to wait (voluntary context switches: a futex sleep, a blocking read);
	// Preempted the times the kernel took it away (involuntary ones).
	Switches, Preempted int64
}

// Sub returns what the process used from before to u.
func (u Usage) Sub(before Usage) Usage {
	return Usage{User: u.User - before.User, System: u.System - before.System,
		Switches: u.Switches - before.Switches, Preempted: u.Preempted - before.Preempted}
}

// Package sysstat reads what the benchmark commands report about the
// machine they ran on: this process's CPU time and the load average.
package sysstat

import (
	"os"
	"strconv"
	"strings"
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

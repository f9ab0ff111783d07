package main

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rssOf returns the resident set size of process pid, from the VmRSS line
// of /proc/<pid>/status, in bytes; ok is false where there is no such file
// (systems other than Linux, or the process is gone).
func rssOf(pid int) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return parseVmRSS(f)
}

// parseVmRSS reads the VmRSS line of a /proc/<pid>/status file.
func parseVmRSS(f io.Reader) (int64, bool) {
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// rssPeak samples the summed RSS of a set of processes every interval
// until stopped, and keeps the largest sum.
type rssPeak struct {
	stop chan struct{}
	done sync.WaitGroup
	peak int64
	seen bool // at least one sample read
}

func sampleRSS(pids []int, interval time.Duration) *rssPeak {
	r := &rssPeak{stop: make(chan struct{})}
	r.done.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			var sum int64
			read := false
			for _, pid := range pids {
				if n, ok := rssOf(pid); ok {
					sum += n
					read = true
				}
			}
			if read {
				r.seen = true
				r.peak = max(r.peak, sum)
			}
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	})
	return r
}

// end stops sampling and returns the peak in bytes; ok is false when no
// sample could be read.
func (r *rssPeak) end() (int64, bool) {
	close(r.stop)
	r.done.Wait()
	return r.peak, r.seen
}

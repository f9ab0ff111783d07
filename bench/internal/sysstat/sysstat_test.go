package sysstat

import (
	"testing"
	"time"
)

func TestParseLoadAvg(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [3]float64
		ok   bool
	}{
		{"0.52 1.25 2.00 3/412 12345\n", [3]float64{0.52, 1.25, 2}, true},
		{"0.52 1.25", [3]float64{}, false},
		{"0.52 x 2.00 3/412 12345", [3]float64{}, false},
		{"", [3]float64{}, false},
	} {
		got, ok := parseLoadAvg(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseLoadAvg(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestProcessCPUGrows(t *testing.T) {
	before := ProcessCPU()
	if before <= 0 {
		t.Skip("this system does not report CPU time")
	}
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
	}
	if after := ProcessCPU(); after <= before {
		t.Errorf("ProcessCPU went from %v to %v over 20ms of spinning", before, after)
	}
}

func TestProcessUsageCountsASleep(t *testing.T) {
	before := ProcessUsage()
	if before.User+before.System <= 0 {
		t.Skip("this system does not report usage")
	}
	// While every goroutine sleeps, the process's threads wait in the
	// kernel: voluntary switches.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 {
			time.Sleep(2 * time.Millisecond)
		}
	}()
	<-done
	d := ProcessUsage().Sub(before)
	if d.Switches <= 0 {
		t.Errorf("no voluntary context switch over three 2ms sleeps: %+v", d)
	}
	if d.User < 0 || d.System < 0 || d.Preempted < 0 {
		t.Errorf("usage went backwards: %+v", d)
	}
}

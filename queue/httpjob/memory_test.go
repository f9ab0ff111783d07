package httpjob

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// floodServer answers every request on loopback with status 200 and n
// header fields (X-Pad-000001: v, ...), written from one shared buffer so
// that the server costs the test's process little memory. It returns the
// base URL.
func floodServer(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n")
	for i := range n {
		fmt.Fprintf(&b, "X-Pad-%06d: v\r\n", i)
	}
	b.WriteString("\r\nok")
	answer := []byte(b.String())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					c.Write(answer)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// floodJobs runs n jobs at once through a Handler with the default Base,
// each answered with a flood of header fields, and returns their errors.
func floodJobs(t *testing.T, api string, n int) []error {
	t.Helper()
	h := &Handler{Throttle: newThrottle(t), Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = h.ProcessJob(context.Background(), &queue.Job{ID: "j" + strconv.Itoa(i), Tenant: "t", Type: Type,
				Downstream: "api", Payload: []byte(`{"url":"` + api + `/x"}`)})
		})
	}
	wg.Wait()
	return errs
}

// TestResponseHeaderLimit: a response whose header is larger than
// downstream.MaxResponseHeaderBytes fails the job (a failure, retried as
// a network error is) without reading the rest; one under it is read.
func TestResponseHeaderLimit(t *testing.T) {
	for _, c := range []struct {
		fields int
		ok     bool
	}{{100, true}, {100_000, false}} {
		api := floodServer(t, c.fields)
		err := floodJobs(t, api, 1)[0]
		var re *queue.RescheduleError
		switch {
		case c.ok && err != nil:
			t.Errorf("%d header fields: %v; want done", c.fields, err)
		case !c.ok && (err == nil || errors.As(err, &re)):
			t.Errorf("%d header fields (1.7 MB): %v; want a failure", c.fields, err)
		case !c.ok && !strings.Contains(err.Error(), strconv.Itoa(downstream.MaxResponseHeaderBytes)):
			t.Errorf("%d header fields: %v; want the limit named", c.fields, err)
		}
	}
}

// TestResponseHeaderFloodRSS measures the process's peak RSS while 16
// jobs at once get answers of 100,000 header fields each (1.7 MB). It
// asserts nothing (RSS depends on the machine and the Go version) and
// runs only when asked:
//
//	SLUICE_MEASURE_RSS=1 go test -count=1 -run TestResponseHeaderFloodRSS -v ./queue/httpjob/
func TestResponseHeaderFloodRSS(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE_RSS") == "" {
		t.Skip("set SLUICE_MEASURE_RSS=1 to measure")
	}
	api := floodServer(t, 100_000)
	runtime.GC()
	debug.FreeOSMemory()
	// Writing 5 to clear_refs resets the peak (VmHWM) to the RSS now.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	before := procStatus(t, "VmRSS")
	failed := 0
	for _, err := range floodJobs(t, api, 16) {
		if err != nil {
			failed++
		}
	}
	t.Logf("16 responses of 100,000 header fields: RSS %d MiB before, peak %d MiB (%d of 16 jobs failed)",
		before>>10, procStatus(t, "VmHWM")>>10, failed)
}

// procStatus reads a field of /proc/self/status in KiB.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

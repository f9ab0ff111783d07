package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain lets the test binary serve as a worker process, as the command
// does: the benchmark starts os.Executable() with the hidden argument.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == workerArg {
		if err := runWorker(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "pace worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmoke runs every approach briefly on a small fleet and checks that
// the report holds what the issue asks for, and that sluice paces.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 20 s")
	}
	redistest.Require(t)
	var buf bytes.Buffer
	out = &buf
	defer func() { out = os.Stdout }()
	plot := filepath.Join(t.TempDir(), "pace.png")
	o := options{
		procs: 2, goroutines: 2, quotas: []int64{50},
		duration: 3 * time.Second, trim: 500 * time.Millisecond, lead: 500 * time.Millisecond, rounds: 1, plot: plot,
		approaches: map[string]bool{"sluice": true, "local": true, "redis_rate": true, "floor": true},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	report := buf.String()
	t.Log(report)
	for _, want := range []string{"## Quota 50/s", "| sluice throttle.Wait | 2 × 2 |", "| rate.Limiter per process | 2 × 2 |",
		"| redis_rate, burst 5 | 2 × 2 |", "| floor: 1 process, 1 rate.Limiter | 1 × 4 |", "Issue 3's targets for sluice"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if len(all) != 1 || len(all[0]) != 4 {
		t.Fatalf("rows: %v", all)
	}
	byKind := map[string]*row{}
	for _, r := range all[0] {
		byKind[r.a.kind] = r
	}
	sl, local := byKind[kindSluice], byKind[kindLocal]
	// Generous bounds: a busy machine delays calls, it does not add them.
	if !sl.steady || sl.sent < 0.8 || sl.sent > 1.05 {
		t.Errorf("sluice sent %.2f of the quota", sl.sent)
	}
	if sl.clientCmds < 0.95 || sl.clientCmds > 1.05 {
		t.Errorf("sluice sent %.3f Redis commands per call, want 1", sl.clientCmds)
	}
	if sl.max1s > 50+5 {
		t.Errorf("sluice: %d calls in a second, quota 50", sl.max1s)
	}
	// Two processes, each with its own limiter at the full quota, send twice
	// the quota; the downstream refuses about half.
	if local.sent < 1.6 || local.limited == 0 {
		t.Errorf("per-process limiters sent %.2f of the quota with %d 429s", local.sent, local.limited)
	}
	if st, err := os.Stat(plot); err != nil || st.Size() == 0 {
		t.Errorf("no plot: %v", err)
	}
}

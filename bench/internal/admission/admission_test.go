package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
)

// fake is a target that needs no Redis: it admits every other call and
// records which ids it saw.
type fake struct {
	mu    sync.Mutex
	calls int
	seen  map[string]int
	fail  bool
}

func (f *fake) target() Target {
	return Target{
		Name: "fake",
		Allow: func(_ context.Context, id string) (bool, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.calls++
			f.seen[id]++
			if f.fail {
				return false, errors.New("boom")
			}
			return f.calls%2 == 0, nil
		},
		RedisKey: func(id string) string { return "fake:" + id },
	}
}

func TestRunMakesExactlyCalls(t *testing.T) {
	for _, conc := range []int{1, 3, 64} {
		f := &fake{seen: map[string]int{}}
		ids := KeyIDs(10)
		r := Run(context.Background(), f.target(), Load{Concurrency: conc, Calls: 1000, IDs: ids, Seed: 7})
		if r.Calls != 1000 || f.calls != 1000 {
			t.Fatalf("c%d: %d calls counted, %d made; want 1000", conc, r.Calls, f.calls)
		}
		if r.Admitted != 500 || r.Errors != 0 {
			t.Fatalf("c%d: admitted %d, errors %d; want 500, 0", conc, r.Admitted, r.Errors)
		}
		if len(f.seen) != len(ids) {
			t.Fatalf("c%d: %d distinct ids used; want all %d", conc, len(f.seen), len(ids))
		}
		if r.PerSecond() <= 0 || r.Quantile(0.99) < r.Quantile(0.5) {
			t.Fatalf("c%d: rate %v, p50 %v, p99 %v", conc, r.PerSecond(), r.Quantile(0.5), r.Quantile(0.99))
		}
	}
}

func TestRunForDuration(t *testing.T) {
	f := &fake{seen: map[string]int{}}
	start := time.Now()
	r := Run(context.Background(), f.target(), Load{Concurrency: 4, Duration: 50 * time.Millisecond, IDs: KeyIDs(3)})
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("ran %v; want about 50ms", d)
	}
	if r.Calls == 0 || r.Elapsed < 50*time.Millisecond {
		t.Fatalf("%d calls in %v", r.Calls, r.Elapsed)
	}
}

func TestRunCountsErrors(t *testing.T) {
	f := &fake{seen: map[string]int{}, fail: true}
	r := Run(context.Background(), f.target(), Load{Concurrency: 2, Calls: 10, IDs: KeyIDs(1)})
	if r.Errors != 10 || r.FirstErr == nil || r.Quantile(0.5) != 0 {
		t.Fatalf("errors %d, first %v, p50 %v", r.Errors, r.FirstErr, r.Quantile(0.5))
	}
}

func TestQuantileAndMerge(t *testing.T) {
	a := Result{Calls: 2, Elapsed: time.Second, latencies: []int64{1, 2}}
	b := Result{Calls: 2, Elapsed: time.Second, latencies: []int64{3, 100}}
	m := Merge(a, b)
	if m.Calls != 4 || m.Elapsed != 2*time.Second || m.PerSecond() != 2 {
		t.Fatalf("merged %+v", m)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 2}, {0.75, 3}, {0.99, 100}, {0, 1}, {1, 100}} {
		if got := m.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v; want %v", c.q, got, c.want)
		}
	}
}

func TestScriptFigures(t *testing.T) {
	d := redisinfo.Snapshot{Commands: map[string]redisinfo.CommandStat{
		"evalsha": {Calls: 5, Usec: 50},
		"hmget":   {Calls: 10, Usec: 20},
		"info":    {Calls: 1, Usec: 25},
		"time":    {Calls: 0, Usec: 0},
	}}
	if scriptCalls(d) != 5 || scriptUsec(d) != 10 {
		t.Errorf("script calls %d, µs %v; want 5, 10", scriptCalls(d), scriptUsec(d))
	}
	if got := innerCommands(d); got != "hmget 2" {
		t.Errorf("innerCommands = %q; want %q", got, "hmget 2")
	}
}

func TestGoal(t *testing.T) {
	if Goal("sliding_window_log") != 0.8 || Goal("gcra") != 1 || Goal(RedisRate) != 0 {
		t.Fatal("goals differ from docs/algorithms.md")
	}
}

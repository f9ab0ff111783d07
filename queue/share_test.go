package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSharesGate steps the gate of a process of 8 goroutines, share 2,
// through a slow key "s" and a second key "f": jobs count as holding
// their goroutine after a second.
func TestSharesGate(t *testing.T) {
	g := newShares(DefaultKeyShare(8), 8, time.Second)
	if g.share != 2 || g.hold != time.Second {
		t.Fatalf("DefaultKeyShare(8) = %d, hold %v; want 2, 1s", g.share, g.hold)
	}
	t0 := time.Unix(1000, 0)
	t1, t2 := t0.Add(2*time.Second), t0.Add(4*time.Second)
	steps := []struct {
		what string
		key  string
		at   time.Time
		exit bool // exit the job that entered at at
		want bool
	}{
		{"s: quick so far", "s", t0, false, true},
		{"s", "s", t0, false, true},
		{"s", "s", t0, false, true},
		{"s holds its share, alone: beyond it", "s", t1, false, true},
		{"s alone", "s", t1, false, true},
		{"s alone", "s", t1, false, true},
		{"s alone: all but one", "s", t1, false, true},
		{"s alone: not the last goroutine", "s", t1, false, false},
		{"f finds the last goroutine", "f", t1, false, true},
		{"f leaves", "f", t1, true, false},
		{"s, f active a moment ago: share left free", "s", t1, false, false},
		{"a held job of s leaves", "s", t0, true, false},
		{"a held job of s leaves", "s", t0, true, false},
		{"s: one job held, under its share", "s", t1, false, true},
		{"s, f idle since: one left free", "s", t2, false, true},
		{"f: under its share", "f", t2, false, true},
		{"s, f running", "s", t2, false, false},
	}
	for _, st := range steps {
		if st.exit {
			g.exit(st.key, st.at)
			continue
		}
		if got := g.enter(st.key, st.at); got != st.want {
			t.Fatalf("%s: enter(%q) = %v, want %v (running %v, all %d)", st.what, st.key, got, st.want, g.running, g.all)
		}
	}
	// A job of no downstream is counted and never refused.
	if !g.enter("", t2) || g.all != 9 {
		t.Fatalf("a job of no downstream: all = %d, want 9", g.all)
	}

	// A slow key at its share takes no more goroutines while another key
	// has work, however many are free: 10 goroutines, s holding 2 for
	// over a second, f running 1, 7 free.
	g = newShares(DefaultKeyShare(10), 10, time.Second)
	g.enter("s", t0)
	g.enter("s", t0)
	if !g.enter("f", t1) {
		t.Fatal("f refused a goroutine")
	}
	if g.enter("s", t1) {
		t.Fatalf("s, at its share of 2, took a third goroutine while f runs (running %v)", g.running)
	}
	g.exit("f", t1)
	if g.enter("s", t1) {
		t.Fatal("s took a third goroutine with f active a moment ago")
	}
	if !g.enter("s", t2) {
		t.Fatal("s alone, f idle for 2 s, refused one of 8 free goroutines")
	}
}

// TestSharesLine: a tenant put back joins its key's line once, a
// goroutine freed wakes the first of the key's line (then of any), and a
// tenant that joined a recheck ago is skipped (it woke by itself).
func TestSharesLine(t *testing.T) {
	g := newShares(1, 2, time.Second)
	g.hold = 0
	t0 := time.Unix(1000, 0)
	g.enter("s", t0)
	g.enter("f", t0)
	for _, w := range []struct{ key, enc string }{{"s", "a"}, {"s", "b"}, {"s", "a"}, {"f", "c"}} {
		if g.wait(w.key, w.enc, t0) {
			t.Fatalf("wait(%q, %q) with every goroutine taken said wake now", w.key, w.enc)
		}
	}
	for _, want := range []struct{ key, enc string }{{"s", "a"}, {"s", "b"}, {"s", "c"}} {
		if enc, ok := g.next(want.key, t0); !ok || enc != want.enc {
			t.Fatalf("next(%q) = %q, %v; want %q", want.key, enc, ok, want.enc)
		}
	}
	if enc, ok := g.next("s", t0); ok {
		t.Fatalf("next on empty lines = %q", enc)
	}
	g.wait("s", "old", t0)
	if enc, ok := g.next("s", t0.Add(time.Second)); ok {
		t.Fatalf("next took %q, who joined a recheck ago", enc)
	}
	g.exit("f", t0)
	g.exit("s", t0)
	if !g.wait("s", "d", t0) {
		t.Fatal("wait with a goroutine free for s did not say wake now")
	}
}

// TestSlowKeyHoldsItsShare: on a process of 4 goroutines (share 1), a
// job of downstream "slow" whose handler blocks holds its goroutine;
// then 7 more of "slow" and 6 of "fast": every "fast" job runs while the
// slow ones block, "slow" never holds more than 3 goroutines, and the
// slow jobs put back run later, each once, with no retry spent.
func TestSlowKeyHoldsItsShare(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 1000)
		ctx := context.Background()
		enqueue := func(id, tenant, downstream string) {
			t.Helper()
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: tenant, Type: "x", Downstream: downstream}); err != nil {
				t.Fatal(err)
			}
		}
		unblock := make(chan struct{})
		var slowNow, slowMax, fastDone, retried atomic.Int64
		var mu sync.Mutex
		runs := map[string]int{}
		h := handlerFunc(func(ctx context.Context, job *Job) error {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			if job.retried > 0 {
				retried.Add(1)
			}
			if job.Downstream == "fast" {
				fastDone.Add(1)
				return nil
			}
			n := slowNow.Add(1)
			defer slowNow.Add(-1)
			for {
				m := slowMax.Load()
				if n <= m || slowMax.CompareAndSwap(m, n) {
					break
				}
			}
			<-unblock
			return nil
		})
		enqueue("s0", "s0", "slow")
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4}, h)
		if srv.cfg.KeyShare != 1 {
			t.Fatalf("KeyShare = %d, want 1 for Concurrency 4", srv.cfg.KeyShare)
		}
		waitFor(t, 30*time.Second, "a slow job holding its goroutine", func() bool {
			g := srv.shares
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.running["slow"]) == 1 && time.Since(g.running["slow"][0]) > g.hold
		})
		for i := 1; i < 8; i++ {
			enqueue(fmt.Sprint("s", i), fmt.Sprint("s", i%4), "slow")
		}
		for i := range 6 {
			enqueue(fmt.Sprint("f", i), fmt.Sprint("f", i), "fast")
		}
		waitFor(t, 60*time.Second, "6 fast jobs done while the slow ones block", func() bool { return fastDone.Load() == 6 })
		if m := slowMax.Load(); m > 3 {
			t.Fatalf("slow held %d of 4 goroutines", m)
		}
		close(unblock)
		waitFor(t, 60*time.Second, "all 14 jobs run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(runs) == 14
		})
		if n := retried.Load(); n > 0 {
			t.Errorf("%d runs had spent a retry", n)
		}
		mu.Lock()
		defer mu.Unlock()
		for id, n := range runs {
			if n != 1 {
				t.Errorf("job %s ran %d times", id, n)
			}
		}
	})
}

package algorithms

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// base is the start of every simulated timeline: aligned to whole seconds,
// so that windows of 1s and 500ms start there.
var base = time.UnixMicro(1_700_000_000_000_000)

// fakeClock is a settable clock shared by a test and the limiter under test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: base} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// target is one implementation that the shared suite runs against.
type target struct {
	name string
	// new builds a limiter for p. With a clock it decides on the clock's
	// readings; with nil it decides on its natural clock (the host's for
	// Local, the server's for Redis).
	new func(t *testing.T, p Policy, clock func() time.Time) Limiter
	// client is the Redis behind the limiter, nil for Local.
	client func(t *testing.T) redis.UniversalClient
}

// targets lists every implementation: in process, on miniredis, and on
// real redis-server processes (standalone and a three-master cluster).
func targets() []target {
	redisTarget := func(name string, client func(t *testing.T) redis.UniversalClient) target {
		return target{
			name:   name,
			client: client,
			new: func(t *testing.T, p Policy, clock func() time.Time) Limiter {
				t.Helper()
				l, err := NewRedis(client(t), p, &RedisOptions{Prefix: redistest.KeyPrefix(t) + "rl", clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
		}
	}
	return []target{
		{
			name: "local",
			new: func(t *testing.T, p Policy, clock func() time.Time) Limiter {
				t.Helper()
				l, err := NewLocal(p, &LocalOptions{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
		},
		redisTarget("miniredis", miniClient),
		redisTarget("redis-standalone", func(t *testing.T) redis.UniversalClient { return redistest.Shared(t) }),
		redisTarget("redis-cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t) }),
	}
}

// miniClient returns a client of a miniredis started for t (one per test,
// memoised so that one test's limiters share it).
var minis sync.Map // *testing.T -> redis.UniversalClient

func miniClient(t *testing.T) redis.UniversalClient {
	if c, ok := minis.Load(t); ok {
		return c.(redis.UniversalClient)
	}
	c := redistest.Mini(t)
	t.Cleanup(func() { minis.Delete(t) })
	minis.Store(t, c)
	return c
}

// forEachTarget runs f as a subtest per target.
func forEachTarget(t *testing.T, f func(t *testing.T, tg target)) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) { f(t, tg) })
	}
}

// row is one step of a timeline: at the given offset from base, call
// AllowN (or PeekN) for key with cost n and expect want exactly.
type row struct {
	at   time.Duration
	n    int64
	peek bool
	want Decision
}

func runRows(t *testing.T, l Limiter, clock *fakeClock, key string, rows []row) {
	t.Helper()
	ctx := context.Background()
	for i, r := range rows {
		clock.Set(base.Add(r.at))
		var d Decision
		var err error
		if r.peek {
			d, err = l.PeekN(ctx, key, r.n)
		} else {
			d, err = l.AllowN(ctx, key, r.n)
		}
		if err != nil {
			t.Fatalf("row %d (at %v, n %d): %v", i, r.at, r.n, err)
		}
		if d != r.want {
			t.Fatalf("row %d (at %v, n %d, peek %v):\n got %+v\nwant %+v", i, r.at, r.n, r.peek, d, r.want)
		}
	}
}

func allow(limit, remaining int64, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func deny(limit, remaining int64, reset, retry time.Duration) Decision {
	return Decision{Limit: limit, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

const ms, us = time.Millisecond, time.Microsecond

// stepTables are the hand-computed timelines every implementation must
// reproduce exactly.
var stepTables = []struct {
	name string
	p    Policy
	rows []row
}{
	{
		// The first call of 10/s leaves exactly 9 (a peer that returns
		// floats through Lua reports 8).
		name: "gcra 10/s exact remaining",
		p:    Policy{Algorithm: GCRA, Limit: 10, Period: time.Second},
		rows: []row{
			{at: 0, n: 1, want: allow(10, 9, 100*ms)},
			{at: 0, n: 9, want: allow(10, 0, time.Second)},
			{at: 0, n: 1, want: deny(10, 0, time.Second, 100*ms)},
			{at: 100*ms - us, n: 1, want: deny(10, 0, time.Second-100*ms+us, us)},
			{at: 100 * ms, n: 1, want: allow(10, 0, time.Second)},
			{at: 2 * time.Second, n: 3, peek: true, want: allow(10, 10, 0)},
			{at: 2 * time.Second, n: 3, want: allow(10, 7, 300*ms)},
		},
	},
	{
		name: "token bucket 10/s matches gcra",
		p:    Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Second},
		rows: []row{
			{at: 0, n: 1, want: allow(10, 9, 100*ms)},
			{at: 0, n: 9, want: allow(10, 0, time.Second)},
			{at: 0, n: 1, want: deny(10, 0, time.Second, 100*ms)},
			{at: 100*ms - us, n: 1, want: deny(10, 0, time.Second-100*ms+us, us)},
			{at: 100 * ms, n: 1, want: allow(10, 0, time.Second)},
			{at: 2 * time.Second, n: 3, peek: true, want: allow(10, 10, 0)},
			{at: 2 * time.Second, n: 3, want: allow(10, 7, 300*ms)},
		},
	},
	{
		// 3/s: the emission interval is 333333.33µs; retry-after is
		// rounded up, never down.
		name: "gcra fractional interval rounds up",
		p:    Policy{Algorithm: GCRA, Limit: 3, Period: time.Second, Burst: 1},
		rows: []row{
			{at: 0, n: 1, want: allow(1, 0, 333334*us)},
			{at: 333333 * us, n: 1, want: deny(1, 0, us, us)},
			// Late by 0.67µs: the TAT restarts from now.
			{at: 333334 * us, n: 1, want: allow(1, 0, 333334*us)},
			{at: 666667 * us, n: 1, want: deny(1, 0, us, us)},
			{at: 666668 * us, n: 1, want: allow(1, 0, 333334*us)},
		},
	},
	{
		// Back to back, the fractions accumulate exactly: three units
		// take exactly one second.
		name: "gcra fractions accumulate exactly",
		p:    Policy{Algorithm: GCRA, Limit: 3, Period: time.Second, Burst: 3},
		rows: []row{
			{at: 0, n: 3, want: allow(3, 0, time.Second)},
			{at: 333333 * us, n: 1, want: deny(3, 0, 666667*us, us)},
			{at: 333334 * us, n: 1, want: allow(3, 0, time.Second)},
			{at: 666666 * us, n: 1, want: deny(3, 0, 666668*us, us)},
			{at: 666667 * us, n: 1, want: allow(3, 0, time.Second)},
			// The next unit is due at exactly 1s: one microsecond
			// earlier is refused.
			{at: 999999 * us, n: 1, want: deny(3, 0, 666668*us, us)},
			{at: time.Second, n: 1, want: allow(3, 0, time.Second)},
		},
	},
	{
		name: "token bucket fractional interval rounds up",
		p:    Policy{Algorithm: TokenBucket, Limit: 3, Period: time.Second, Burst: 1},
		rows: []row{
			{at: 0, n: 1, want: allow(1, 0, 333334*us)},
			{at: 333333 * us, n: 1, want: deny(1, 0, us, us)},
			{at: 333334 * us, n: 1, want: allow(1, 0, 333334*us)},
		},
	},
	{
		// Sub-second windows: a peer that sets EXPIRE 0 never limits.
		name: "fixed window 5 per 500ms",
		p:    Policy{Algorithm: FixedWindow, Limit: 5, Period: 500 * ms},
		rows: []row{
			{at: 0, n: 1, want: allow(5, 4, 500*ms)},
			{at: 100 * ms, n: 4, want: allow(5, 0, 400*ms)},
			{at: 200 * ms, n: 1, want: deny(5, 0, 300*ms, 300*ms)},
			{at: 499 * ms, n: 1, want: deny(5, 0, ms, ms)},
			{at: 500 * ms, n: 2, want: allow(5, 3, 500*ms)},
			{at: 600 * ms, n: 4, want: deny(5, 3, 400*ms, 400*ms)},
			{at: 600 * ms, n: 3, want: allow(5, 0, 400*ms)},
		},
	},
	{
		name: "sliding window log 3 per second",
		p:    Policy{Algorithm: SlidingWindowLog, Limit: 3, Period: time.Second},
		rows: []row{
			{at: 0, n: 1, want: allow(3, 2, time.Second)},
			{at: 100 * ms, n: 1, want: allow(3, 1, time.Second)},
			{at: 200 * ms, n: 1, want: allow(3, 0, time.Second)},
			{at: 300 * ms, n: 1, want: deny(3, 0, 900*ms, 700*ms)},
			{at: 300 * ms, n: 2, want: deny(3, 0, 900*ms, 800*ms)},
			{at: 999 * ms, n: 1, want: deny(3, 0, 201*ms, ms)},
			// The entry at 0 leaves the window (now-1s, now] at 1s.
			{at: time.Second, n: 1, want: allow(3, 0, time.Second)},
			{at: 1100 * ms, n: 2, peek: true, want: deny(3, 1, 900*ms, 100*ms)},
			{at: 1200 * ms, n: 2, want: allow(3, 0, time.Second)},
		},
	},
	{
		name: "sliding window counter 10 per second",
		p:    Policy{Algorithm: SlidingWindowCounter, Limit: 10, Period: time.Second},
		rows: []row{
			{at: 0, n: 10, want: allow(10, 0, 2*time.Second)},
			// Next window: the previous 10 weigh 10*(1s-e)/1s; one more
			// fits once that is at most 9, at e = 100ms.
			{at: 500 * ms, n: 1, want: deny(10, 0, 1500*ms, 600*ms)},
			{at: 1099 * ms, n: 1, want: deny(10, 0, 901*ms, ms)},
			{at: 1100 * ms, n: 1, want: allow(10, 0, 1900*ms)},
			{at: 1500 * ms, n: 5, peek: true, want: deny(10, 4, 1500*ms, 100*ms)},
			{at: 1600 * ms, n: 5, want: allow(10, 0, 1400*ms)},
			// Two windows later everything has slid out.
			{at: 3 * time.Second, n: 10, want: allow(10, 0, 2*time.Second)},
		},
	},
	{
		name: "fixed window demonstrates the boundary burst",
		p:    Policy{Algorithm: FixedWindow, Limit: 4, Period: time.Second},
		rows: []row{
			{at: 999 * ms, n: 4, want: allow(4, 0, ms)},
			{at: time.Second, n: 4, want: allow(4, 0, time.Second)},
		},
	},
}

func TestStepTables(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for _, tc := range stepTables {
			t.Run(tc.name, func(t *testing.T) {
				clock := newClock()
				l := tg.new(t, tc.p, clock.Now)
				runRows(t, l, clock, "tenant-1", tc.rows)
			})
		}
	})
}

func TestDeniedCallsDoNotConsume(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				clock := newClock()
				l := tg.new(t, Policy{Algorithm: alg, Limit: 2, Period: time.Second}, clock.Now)
				ctx := context.Background()
				if _, err := l.AllowN(ctx, "k", 2); err != nil {
					t.Fatal(err)
				}
				d, err := l.AllowN(ctx, "k", 1)
				if err != nil || d.Allowed {
					t.Fatalf("third call: %+v, %v; want a denial", d, err)
				}
				retry := d.RetryAfter
				// A client hammering while denied must not push its own
				// retry time back.
				for i := 0; i < 20; i++ {
					clock.Set(base.Add(time.Duration(i) * retry / 40))
					d, err := l.AllowN(ctx, "k", 1)
					if err != nil || d.Allowed {
						t.Fatalf("hammer %d: %+v, %v; want a denial", i, d, err)
					}
				}
				clock.Set(base.Add(retry))
				if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("at retry-after %v: %+v, %v; want admission", retry, d, err)
				}
			})
		}
	})
}

func TestInvalidCallsChangeNothing(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				clock := newClock()
				l := tg.new(t, Policy{Algorithm: alg, Limit: 5, Period: time.Second}, clock.Now)
				ctx := context.Background()
				for _, c := range []struct {
					key  string
					n    int64
					want error
				}{
					{"k", 6, ErrCostExceedsCapacity},
					{"k", 0, ErrInvalidCost},
					{"k", -3, ErrInvalidCost},
					{"", 1, ErrInvalidKey},
				} {
					if _, err := l.AllowN(ctx, c.key, c.n); !errors.Is(err, c.want) {
						t.Errorf("AllowN(%q, %d) = %v, want %v", c.key, c.n, err, c.want)
					}
					if _, err := l.PeekN(ctx, c.key, c.n); !errors.Is(err, c.want) {
						t.Errorf("PeekN(%q, %d) = %v, want %v", c.key, c.n, err, c.want)
					}
				}
				if err := l.Reset(ctx, ""); !errors.Is(err, ErrInvalidKey) {
					t.Errorf("Reset(\"\") = %v, want ErrInvalidKey", err)
				}
				if d, err := l.PeekN(ctx, "k", 5); err != nil || !d.Allowed || d.Remaining != 5 {
					t.Errorf("after invalid calls: %+v, %v; want the full capacity of 5", d, err)
				}
			})
		}
	})
}

func TestPeekAndReset(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				clock := newClock()
				l := tg.new(t, Policy{Algorithm: alg, Limit: 3, Period: time.Second}, clock.Now)
				ctx := context.Background()
				for i := 0; i < 5; i++ {
					if d, err := l.PeekN(ctx, "k", 3); err != nil || !d.Allowed || d.Remaining != 3 {
						t.Fatalf("peek %d: %+v, %v", i, d, err)
					}
				}
				if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed || d.Remaining != 0 {
					t.Fatalf("allow: %+v, %v", d, err)
				}
				if d, err := l.PeekN(ctx, "k", 1); err != nil || d.Allowed {
					t.Fatalf("peek after allow: %+v, %v", d, err)
				}
				if err := l.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
					t.Fatalf("allow after reset: %+v, %v", d, err)
				}
			})
		}
	})
}

// hostileKeys are tenant ids that break naive key schemes: hash-tag
// braces, separators, whitespace, unicode and a megabyte.
var hostileKeys = []string{
	"a", "a}", "{a}", "a}b", "}", "{", "{}", "a:b", "a:b:", ":a:b",
	"with space", "new\nline", "tab\t", "ünïcødé", "日本", "\x00", "=a", "#a",
	strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("m", 1<<20),
	strings.Repeat("m", 1<<20) + "!",
}

func TestHostileKeysAreIsolated(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				clock := newClock()
				l := tg.new(t, Policy{Algorithm: alg, Limit: 1, Period: time.Hour}, clock.Now)
				ctx := context.Background()
				for i, k := range hostileKeys {
					d, err := l.AllowN(ctx, k, 1)
					if err != nil {
						t.Fatalf("key %d: %v", i, err)
					}
					if !d.Allowed {
						t.Fatalf("key %d (%.20q) was refused: it shares state with an earlier key", i, k)
					}
				}
				for i, k := range hostileKeys {
					if d, err := l.AllowN(ctx, k, 1); err != nil || d.Allowed {
						t.Fatalf("key %d second call: %+v, %v; want a denial", i, d, err)
					}
				}
			})
		}
	})
}

// TestClockStepsBack: when the clock goes back (a failover to a Redis
// whose clock is behind, NTP on the host of a Local), nothing is admitted
// twice: decisions are taken at the latest time the key has seen.
func TestClockStepsBack(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				clock := newClock()
				l := tg.new(t, Policy{Algorithm: alg, Limit: 4, Period: time.Second}, clock.Now)
				ctx := context.Background()
				clock.Set(base.Add(10 * time.Second))
				if d, err := l.AllowN(ctx, "k", 4); err != nil || !d.Allowed {
					t.Fatalf("at 10s: %+v, %v", d, err)
				}
				for _, back := range []time.Duration{us, 300 * ms, 5 * time.Second, 9 * time.Second} {
					clock.Set(base.Add(10*time.Second - back))
					if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed {
						t.Fatalf("%v earlier: %+v, %v; want a denial", back, d, err)
					}
				}
			})
		}
	})
}

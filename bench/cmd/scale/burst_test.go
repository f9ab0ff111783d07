package main

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

// TestMain stops the shared redis-server the tests start.
func TestMain(m *testing.M) { redistest.Main(m) }

// shopSlots books calls slots of one per-tenant key at Shopify's rate (2
// a second) with the given burst and guard (throttle.Limit.Guard), through
// throttle's reserve script on a miniredis whose clock stands still, every
// booking made at the same instant, as a backlog of a tenant's jobs does
// when the workers start. It returns each slot's offset from that instant.
func shopSlots(t *testing.T, burst int64, guard time.Duration, calls int) []time.Duration {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := miniredis.RunT(t)
	m.SetTime(t0)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	th, err := throttle.New(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	lim := throttle.Limit{Rate: shopRate, Per: time.Second, Burst: burst, MaxWait: time.Hour, Guard: guard}
	slots := make([]time.Duration, calls)
	for i := range slots {
		r, err := th.Reserve(context.Background(), "shop-1", lim, 1)
		if err != nil || !r.OK {
			t.Fatalf("call %d: %+v, %v", i+1, r, err)
		}
		slots[i] = r.Delay
	}
	return slots
}

// TestBurstIsTheAPIsBucketExactly: sluice's per-tenant GCRA with Burst 40,
// without its guard, and the API's leaky bucket of 40 leaking 2/s
// (Shopify's definition) are the same rule, neither one call off: with every call arriving at its
// slot, the bucket takes all of them and is full to the brim after each
// paced one, and the first paced call arriving 1 µs before its slot is
// refused by 1 µs.
func TestBurstIsTheAPIsBucketExactly(t *testing.T) {
	slots := shopSlots(t, shopCapacity, -1, 60)
	for i, s := range slots {
		want := time.Duration(0)
		if i >= shopCapacity {
			want = time.Duration(i-shopCapacity+1) * 500 * time.Millisecond
		}
		if s != want {
			t.Fatalf("call %d's slot at %v; want %v", i+1, s, want)
		}
	}
	b := newLeakyBucket(shopRate, shopCapacity)
	for i, s := range slots {
		if ok, _, over := b.decide(s); !ok {
			t.Fatalf("call %d at its slot %v refused, overflow %v", i+1, s, over)
		}
		if i >= shopCapacity-1 && b.level != shopCapacity*b.interval {
			t.Errorf("after call %d the bucket holds %v; want it full, %v", i+1, b.level, shopCapacity*b.interval)
		}
	}
	early := newLeakyBucket(shopRate, shopCapacity)
	for _, s := range slots[:shopCapacity] {
		early.decide(s)
	}
	if ok, _, over := early.decide(slots[shopCapacity] - time.Microsecond); ok || over != time.Microsecond {
		t.Errorf("call 41, 1µs before its slot: accepted %v, overflow %v; want refused by 1µs", ok, over)
	}
}

// TestSwitchRefusalIsLagSpread: the one 429 a tenant draws at the switch
// from the burst to the paced rate comes from the time between a slot and
// the call's arrival at the API, when it is longer for the burst's calls
// (sent in the workers' start-up rush) than for the first paced call (sent
// after a quiet sleep): the API's bucket has leaked less than the slot
// assumed. A lag the same for every call (a constant latency, or the API's
// clock off Redis's) costs nothing; a burst one below the API's bucket
// absorbs any lag spread under one interval (500 ms), and sluice's guard
// (throttle.Limit.Guard, 250 ms in this benchmark's policy) any under
// the guard.
func TestSwitchRefusalIsLagSpread(t *testing.T) {
	for _, c := range []struct {
		name               string
		burst              int64
		guard              time.Duration // throttle.Limit.Guard; 0 or negative: none
		burstLag, pacedLag time.Duration
		wantRefused        []int // the calls refused, from 1
		wantOverflow       time.Duration
	}{
		{name: "no lag", burst: 40, guard: -1},
		{name: "the same lag for every call", burst: 40, guard: -1, burstLag: 3 * time.Millisecond, pacedLag: 3 * time.Millisecond},
		{name: "burst 5ms late, paced 1ms", burst: 40, guard: -1, burstLag: 5 * time.Millisecond, pacedLag: time.Millisecond,
			wantRefused: []int{41}, wantOverflow: 4 * time.Millisecond},
		{name: "burst 39, burst 5ms late, paced 1ms", burst: 39, guard: -1, burstLag: 5 * time.Millisecond, pacedLag: time.Millisecond},
		{name: "burst 39, burst 400ms late, paced 0", burst: 39, guard: -1, burstLag: 400 * time.Millisecond},
		{name: "burst 40 and the guard, burst 5ms late, paced 1ms", burst: 40, guard: sluiceGuard, burstLag: 5 * time.Millisecond, pacedLag: time.Millisecond},
		{name: "burst 40 and the guard, burst 301ms late, paced 1ms", burst: 40, guard: sluiceGuard, burstLag: 301 * time.Millisecond, pacedLag: time.Millisecond,
			wantRefused: []int{41}, wantOverflow: 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			slots := shopSlots(t, c.burst, c.guard, 60)
			b := newLeakyBucket(shopRate, shopCapacity)
			var refused []int
			var firstOver time.Duration
			for i, s := range slots {
				lag := c.pacedLag
				if s == 0 {
					lag = c.burstLag
				}
				if ok, _, over := b.decide(s + lag); !ok {
					if refused == nil {
						firstOver = over
					}
					refused = append(refused, i+1)
				}
			}
			if len(refused) != len(c.wantRefused) || (len(refused) > 0 && refused[0] != c.wantRefused[0]) {
				t.Fatalf("calls refused %v; want %v", refused, c.wantRefused)
			}
			if firstOver != c.wantOverflow {
				t.Errorf("the refusal overflowed the bucket by %v; want %v", firstOver, c.wantOverflow)
			}
		})
	}
}

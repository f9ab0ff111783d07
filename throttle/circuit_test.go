package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestCircuitSteps: two processes on one fake clock. Four failures in a
// leave the circuit closed; a success starts the count again; five open
// it for the fleet: b, which knew of nothing, learns it from its first
// failure; after the cool-down one probe goes, the others wait; the
// probe's failure opens the circuit again, the next probe's success
// closes it, and a healthy key then asks nothing of Redis.
func TestCircuitSteps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, clock.Now, &Options{Prefix: prefix})
		b := newThrottle(t, client, clock.Now, &Options{Prefix: prefix})
		a.hostNow, b.hostNow = clock.Now, clock.Now
		ctx := context.Background()
		c := Circuit{Name: "hooks", Cooldown: 10 * time.Second}
		const key = "hooks/t1"
		report := func(th *Throttle, failed bool) {
			t.Helper()
			if err := th.CircuitReport(ctx, key, c, failed); err != nil {
				t.Fatal(err)
			}
		}
		wait := func(th *Throttle, want time.Duration, what string) {
			t.Helper()
			got, err := th.CircuitWait(ctx, key, c)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: CircuitWait = %v, want %v", what, got, want)
			}
		}
		for range 4 {
			report(a, true)
		}
		wait(a, 0, "4 failures")
		report(a, false)
		for range 4 {
			report(a, true)
		}
		wait(a, 0, "a success, then 4 failures")
		report(a, true)
		wait(a, 10*time.Second, "5 consecutive failures")
		wait(b, 0, "b knows nothing yet")
		clock.Set(2 * time.Second)
		report(b, true) // a call in flight when it opened
		wait(b, 8*time.Second, "b after its failure")
		if st := b.Circuits(); len(st) != 1 || st[0].State != CircuitOpen || st[0].Key != key {
			t.Fatalf("b's circuits: %+v", st)
		}
		clock.Set(10 * time.Second)
		wait(a, 0, "a's probe")
		wait(a, halfOpenPoll, "a while its probe is out")
		wait(b, halfOpenPoll, "b while a's probe is out")
		report(a, true) // the probe failed
		wait(a, 10*time.Second, "the probe failed")
		clock.Set(21 * time.Second)
		wait(b, 0, "b's probe")
		report(b, false)
		if st := b.Circuits(); len(st) != 0 {
			t.Fatalf("b's circuits after the probe's success: %+v", st)
		}
		clock.Set(21*time.Second + halfOpenPoll)
		wait(a, 0, "a hears it closed")
		if st := a.Circuits(); len(st) != 0 {
			t.Fatalf("a's circuits: %+v", st)
		}
		// Closed and healthy: no round trip, even with Redis gone.
		gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { gone.Close() })
		off := newThrottle(t, gone, nil, nil)
		if w, err := off.CircuitWait(ctx, key, c); w != 0 || err != nil {
			t.Fatalf("a closed circuit asked Redis: %v, %v", w, err)
		}
		if err := off.CircuitReport(ctx, key, c, false); err != nil {
			t.Fatalf("a success on a healthy key asked Redis: %v", err)
		}
		if w, err := a.CircuitWait(ctx, key, Circuit{Failures: -1}); w != 0 || err != nil {
			t.Fatalf("no circuit: %v, %v", w, err)
		}
	})
}

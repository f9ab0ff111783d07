package clockhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/clockhook"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestSetDecidesOnTheGivenClock: options set through the hook make the
// scripts decide on the clock given, not the Redis server's: at 12:00:20
// of a fixed one-a-minute window the refusal says 40s exactly, and a
// throttle's second slot at one a minute is exactly a minute away.
func TestSetDecidesOnTheGivenClock(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 20, 0, time.UTC)
	clock := func() time.Time { return now }
	client := redistest.Shared(t)

	l, err := algorithms.NewRedis(client, algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 1, Period: time.Minute},
		clockhook.Set(&algorithms.RedisOptions{Prefix: redistest.KeyPrefix(t) + "rl"}, clock))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first call: %+v, %v", d, err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed || d.RetryAfter != 40*time.Second {
		t.Errorf("second call: %+v, %v; want refused, retry after 40s (on the given clock)", d, err)
	}

	th, err := throttle.New(client, clockhook.Set(&throttle.Options{Prefix: redistest.KeyPrefix(t) + "th"}, clock))
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	lim := throttle.Limit{Rate: 1, Per: time.Minute, MaxWait: time.Hour}
	for i, want := range []time.Duration{0, time.Minute} {
		if r, err := th.Reserve(ctx, "k", lim, 1); err != nil || !r.OK || r.Delay != want {
			t.Errorf("reservation %d: %+v, %v; want a slot in %v", i+1, r, err, want)
		}
	}
}

// TestSetUnregistered: a type whose package registered no setter is a
// mistake in the test that asks, reported by a panic naming the type.
func TestSetUnregistered(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Error("Set on an unregistered type did not panic")
		}
	}()
	clockhook.Set(&struct{ x int }{}, time.Now)
}

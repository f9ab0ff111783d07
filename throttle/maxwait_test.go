package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMaxWaitMeaning pins one meaning of Limit.MaxWait: zero (unset) is
// DefaultMaxWait, 10s; NoWait, and any negative value, takes only a slot
// due now; a positive value is the furthest a slot may be. The policy
// file's max_wait means the same (queue/policy's TestMaxWaitInTheFile).
func TestMaxWaitMeaning(t *testing.T) {
	for _, c := range []struct {
		wait, want time.Duration
	}{{0, DefaultMaxWait}, {NoWait, 0}, {-5 * time.Second, 0}, {3 * time.Second, 3 * time.Second}} {
		if got := (Limit{Rate: 1, MaxWait: c.wait}).WaitLimit(); got != c.want {
			t.Errorf("Limit{MaxWait: %v}.WaitLimit() = %v, want %v", c.wait, got, c.want)
		}
	}
	if DefaultMaxWait != 10*time.Second {
		t.Errorf("DefaultMaxWait = %v; docs/throttle.md and docs/policy.md say 10s", DefaultMaxWait)
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		// One call a second: the k-th booking of a key is k-1 seconds away.
		book := func(key string, lim Limit, calls int) Reservation {
			t.Helper()
			var r Reservation
			for range calls {
				var err error
				if r, err = th.Reserve(ctx, key, lim, 1); err != nil {
					t.Fatal(err)
				}
			}
			return r
		}
		if r := book("unset", Limit{Rate: 1}, 11); !r.OK || r.Delay != 10*time.Second {
			t.Errorf("MaxWait 0, slot 10s away: %+v, want booked (the default 10s)", r)
		}
		if r := book("unset", Limit{Rate: 1}, 1); r.OK || r.RetryAfter != time.Second {
			t.Errorf("MaxWait 0, slot 11s away: %+v, want refused, retry after 1s", r)
		}
		if r := book("nowait", Limit{Rate: 1, MaxWait: NoWait}, 1); !r.OK || r.Delay != 0 {
			t.Errorf("NoWait, slot due now: %+v, want booked", r)
		}
		if r := book("nowait", Limit{Rate: 1, MaxWait: NoWait}, 1); r.OK || r.RetryAfter != time.Second {
			t.Errorf("NoWait, slot 1s away: %+v, want refused, retry after 1s", r)
		}
		if r := book("2s", Limit{Rate: 1, MaxWait: 2 * time.Second}, 4); r.OK || r.RetryAfter != time.Second {
			t.Errorf("MaxWait 2s, slot 3s away: %+v, want refused, retry after 1s", r)
		}
	})
}

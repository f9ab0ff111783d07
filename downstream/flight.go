package downstream

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// ConcurrencyProbe is how long a key's cap on calls in flight, set by a
// concurrency refusal, holds before it rises by one: the API's cap may
// have been shared with calls that ended, or raised.
const ConcurrencyProbe = 30 * time.Second

// flightKey names one key of one Throttle: the calls in flight through
// every Transport of the process on that key count together.
type flightKey struct {
	th  *throttle.Throttle
	key string
}

// flight is a key's calls in flight in this process and, after a
// concurrency refusal, its cap: the calls that were in flight beside the
// refused one (at least 1). The cap rises by one each ConcurrencyProbe
// without a further refusal, and lifts once it is above the most calls
// that were ever in flight when one was refused.
type flight struct {
	n, limit, peak int
	since          time.Time     // when limit last changed
	wake           chan struct{} // closed when a call leaves; nil when nobody waits
}

// flights holds the keys with calls in flight or a cap; an idle key
// without a cap is dropped, so per-tenant keys cost nothing at rest.
var flights = struct {
	sync.Mutex
	keys map[flightKey]*flight
}{keys: map[flightKey]*flight{}}

// inFlight is a key's entry in flights.
type inFlight struct{ k flightKey }

func (t *Transport) flight(key string) inFlight { return inFlight{flightKey{t.Throttle, key}} }

// enter counts a call in flight once the key's cap allows it, waiting
// for a call to leave while it does not; it fails only when ctx ends.
func (f inFlight) enter(ctx context.Context) error {
	for {
		flights.Lock()
		fl := flights.keys[f.k]
		if fl == nil {
			fl = &flight{}
			flights.keys[f.k] = fl
		}
		if fl.limit > 0 && time.Since(fl.since) >= ConcurrencyProbe {
			fl.limit, fl.since = fl.limit+1, time.Now()
			if fl.limit > fl.peak {
				fl.limit, fl.peak = 0, 0
			}
		}
		if fl.limit == 0 || fl.n < fl.limit {
			fl.n++
			flights.Unlock()
			return nil
		}
		if fl.wake == nil {
			fl.wake = make(chan struct{})
		}
		w := fl.wake
		flights.Unlock()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-w:
		}
	}
}

// leave counts the call out: refused for concurrency, it caps the key at
// the calls still in flight (at least 1).
func (f inFlight) leave(refused Refusal) {
	flights.Lock()
	defer flights.Unlock()
	fl := flights.keys[f.k]
	if fl == nil {
		return
	}
	fl.n--
	if refused == ConcurrencyRefused {
		limit := max(fl.n, 1)
		if fl.limit == 0 || limit < fl.limit {
			fl.limit = limit
		}
		fl.peak, fl.since = max(fl.peak, fl.n+1), time.Now()
	}
	if fl.wake != nil {
		close(fl.wake)
		fl.wake = nil
	}
	if fl.n <= 0 && fl.limit == 0 {
		delete(flights.keys, f.k)
	}
}

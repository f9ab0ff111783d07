package throttle

import (
	"context"
	"sync"
	"time"
)

// clockResample is how old the estimate of Redis's clock may grow before
// the next use asks Redis's TIME again; clockSampleTimeout is that round
// trip's context (go-redis holds the dial to it; a reply is waited for
// the client's ReadTimeout); a reply slower than clockSampleRTT is not
// used (it says too little about when Redis read its clock); of
// clockSampleTries round trips, the quickest is kept.
const (
	clockResample      = 30 * time.Second
	clockSampleTimeout = 2 * time.Second
	clockSampleRTT     = 50 * time.Millisecond
	clockSampleTries   = 3
)

// serverClock estimates the Redis server's clock on this host: the host's
// clock plus the offset measured by the latest usable TIME round trip
// (Redis's reply less the round trip's midpoint, off by at most half the
// round trip). Reading it never waits on Redis: a stale estimate is used
// while a goroutine takes the next sample. In a cluster the masters'
// clocks are taken to agree.
type serverClock struct {
	mu      sync.Mutex
	offset  time.Duration // Redis's clock less the host's
	asked   time.Time     // the host's time of the last attempt; zero: none
	pending bool          // a sample is being taken
	closed  bool          // the Throttle is closed: start no sample
}

// serverNow returns the estimate of the Redis server's clock at host, a
// reading of the host's clock just taken, and starts a sample in the
// background when the estimate is older than clockResample. Before the
// first sample it is host. On an injected clock (tests) it is that clock.
func (t *Throttle) serverNow(host time.Time) time.Time {
	if t.clock != nil {
		return t.clock()
	}
	sc := &t.srvClock
	sc.mu.Lock()
	off := sc.offset
	if !sc.pending && !sc.closed && (sc.asked.IsZero() || host.Sub(sc.asked) > clockResample) {
		sc.pending, sc.asked = true, host
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), clockSampleTimeout)
			defer cancel()
			t.sampleServerClock(ctx)
		}()
	}
	sc.mu.Unlock()
	return host.Add(off)
}

// sampleServerClock asks Redis's TIME clockSampleTries times, one after
// another, and keeps the offset shown by the quickest reply, when it came
// back within clockSampleRTT: the offset is off by at most half that
// reply's round trip, so a round trip slowed by a busy host or network
// spoils nothing. It reports whether it kept one.
func (t *Throttle) sampleServerClock(ctx context.Context) bool {
	best, off := clockSampleRTT+1, time.Duration(0)
	for range clockSampleTries {
		sent := t.hostNow()
		srv, err := t.client.Time(ctx).Result()
		got := t.hostNow()
		if err != nil {
			break
		}
		if rtt := got.Sub(sent); rtt >= 0 && rtt < best {
			best, off = rtt, srv.Sub(sent.Add(rtt/2))
		}
	}
	sc := &t.srvClock
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.pending = false
	if best > clockSampleRTT {
		return false
	}
	sc.offset = off
	return true
}

// closeServerClock stops serverNow from starting samples; Close then
// waits for one under way (on a Redis that hangs, for the client's
// ReadTimeout at most).
func (t *Throttle) closeServerClock() {
	t.srvClock.mu.Lock()
	t.srvClock.closed = true
	t.srvClock.mu.Unlock()
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/ratio"
	"github.com/sluicehq/sluice/internal/scripts"
)

// kindOffset is an experiment, not one of issue 3's approaches (run it
// with -approaches sluice,sluice_offset,floor): sluice's own reservation
// script, but the worker sleeps until the slot's time on the server's
// clock, translated to its own clock by the tightest offset it has seen,
// instead of counting the delay from the arrival of each reply.
//
// throttle.Wait counts the delay from the reply's arrival, which is never
// early but adds each reply's own latency to its call: on a loaded machine
// that latency varies by milliseconds from one reply to the next, and the
// downstream sees it as jitter. The server's time of the slot is known
// from the reply (the TAT after the reservation, less Burst intervals),
// and so is the server's time when it decided (the slot less the delay).
// Each reply bounds the offset between the clocks: host − server ≤
// arrival − decision. The smallest bound seen lately is the tightest; a
// slot counted with it is still never early (as long as the server's clock
// does not step back by more than the window's spread), and it is clamped
// to [sent + delay, arrived + delay], the only interval the slot can be
// in, so a step of the clock costs at most one round trip.
const kindOffset = "sluice_offset"

// kindSkip is a second experiment on top of kindOffset (-approaches
// sluice_skip): a waiter that wakes more than -max-late after its slot
// (on the server's clock, so a slow reply counts too) does not call; it
// leaves the slot as a gap and books again. A call that late would make
// the next calls, sent on time, look early to a strict downstream: about
// (lateness − tolerance) / interval of them get 429. A gap costs one slot.
const kindSkip = "sluice_skip"

// offsetPacer paces one key for the goroutines of a process.
type offsetPacer struct {
	rdb           *redis.Client
	key           string
	rl, pr, burst int64
	args          []any
	base          time.Time // host times are µs from base, on the monotonic clock
	mu            sync.Mutex
	bounds        []offsetBound // recent bounds, oldest first
	window        time.Duration // how long a bound is kept
	maxLate       time.Duration // kindSkip: a slot missed by more is left as a gap
}

type offsetBound struct {
	at  int64 // host µs when it was seen
	off int64 // host µs − server µs, an upper bound
}

func newOffsetPacer(rdb *redis.Client, prefix string, quota int64, maxWait time.Duration) (*offsetPacer, error) {
	key, err := keyspace.Key(prefix, "rate", "api")
	if err != nil {
		return nil, err
	}
	p := &offsetPacer{rdb: rdb, key: key, burst: 1, base: time.Now(), window: 2 * time.Second}
	p.rl, p.pr = ratio.Reduce(quota, int64(time.Second/time.Microsecond))
	p.args = []any{strconv.FormatInt(p.rl, 10), strconv.FormatInt(p.pr, 10), strconv.FormatInt(p.burst, 10),
		1, int64(maxWait / time.Microsecond), "1", ""}
	return p, nil
}

func (p *offsetPacer) hostUs(t time.Time) int64 { return int64(t.Sub(p.base) / time.Microsecond) }

// bound records a new bound and returns the smallest of the recent ones.
func (p *offsetPacer) bound(at, off int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := at - int64(p.window/time.Microsecond)
	i := 0
	for i < len(p.bounds) && p.bounds[i].at < keep {
		i++
	}
	p.bounds = append(p.bounds[i:], offsetBound{at: at, off: off})
	best := off
	for _, b := range p.bounds {
		best = min(best, b.off)
	}
	return best
}

// offsetTiming is what one wait measured.
type offsetTiming struct {
	rtt, late, gained time.Duration
	skipped           int // kindSkip: slots left as gaps before this one
}

// wait books the next slot and sleeps until it. With maxLate set, a slot
// it wakes too late for is skipped and another booked.
func (p *offsetPacer) wait(ctx context.Context) (offsetTiming, error) {
	skipped := 0
	for {
		tm, err := p.waitOnce(ctx)
		tm.skipped = skipped
		if err != nil || p.maxLate <= 0 || tm.late <= p.maxLate {
			return tm, err
		}
		skipped++
	}
}

func (p *offsetPacer) waitOnce(ctx context.Context) (offsetTiming, error) {
	var tm offsetTiming
	sent := time.Now()
	v, err := scripts.ThrottleReserve.Run(ctx, p.rdb, []string{p.key}, p.args...).Int64Slice()
	arrived := time.Now()
	tm.rtt = arrived.Sub(sent)
	if err != nil {
		return tm, err
	}
	if len(v) != 8 {
		return tm, fmt.Errorf("reserve: %d values", len(v))
	}
	if v[0] != 1 {
		return tm, fmt.Errorf("reserve: slot too far, retry after %dµs", v[2])
	}
	delayUs := v[1]
	if delayUs == 0 {
		return tm, nil // due now: counted from the decision, it is at most one round trip late
	}
	delay := time.Duration(delayUs) * time.Microsecond
	// The slot on the server's clock: the TAT after booking, a + f/rl,
	// less Burst intervals of pr/rl, rounded up to a µs.
	k := p.burst*p.pr - v[5]
	slot := v[4] - k/p.rl
	decided := slot - delayUs // ≤ the server's clock when it ran the script
	off := p.bound(p.hostUs(arrived), p.hostUs(arrived)-decided)
	due := p.base.Add(time.Duration(slot+off) * time.Microsecond)
	lo, hi := sent.Add(delay), arrived.Add(delay)
	if due.Before(lo) {
		due = lo
	}
	if due.After(hi) {
		due = hi
	}
	tm.gained = hi.Sub(due)
	t := time.NewTimer(time.Until(due))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return tm, ctx.Err()
	case <-t.C:
	}
	// Lateness against the slot on the server's clock: the timer's, and
	// that of the clamp when the reply was slower than the best one.
	tm.late = time.Since(p.base.Add(time.Duration(slot+off) * time.Microsecond))
	return tm, nil
}

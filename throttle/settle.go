package throttle

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/scripts"
)

// Settle corrects r, booked at an estimate, to the call's actual cost
// once the call reports it (an LLM API's usage, a GraphQL query's actual
// cost): in one atomic step every bucket of the key that counts cost
// (Counts is CountsCost) moves by actual minus what r booked there. A
// call that used less gives back the rest; one that used more books the
// overrun as debt, which the calls booked after it wait for. Buckets that
// count calls are left as they are. A refund never empties a bucket below
// now (it cannot make more burst than the bucket allows) nor reopens a
// pause.
//
// Settle a reservation once; a second Settle corrects again. A
// reservation that booked nothing (not OK, or a Peek) settles to
// nothing. docs/throttle.md (Reserve, then settle) has the rule.
func (t *Throttle) Settle(ctx context.Context, r Reservation, actual int64) error {
	if actual < 0 {
		return fmt.Errorf("%w: actual cost %d", algorithms.ErrInvalidCost, actual)
	}
	if !r.OK || r.key == "" {
		return nil
	}
	c := r.compile
	if r.Local {
		if d := actual - r.n; r.localBook && t.local != nil && d != 0 {
			t.local.settle(r.key, c, d, t.hostNow())
			t.countSettled(c, d)
		}
		return nil
	}
	if !r.queued {
		return nil
	}
	k, err := t.rateKey(r.key)
	if err != nil {
		return err
	}
	args := []any{t.now(), c.guard}
	for i, b := range append([]bucket{c.bucket}, c.also...) {
		if d := actual - r.tats[i].n; b.rate.Counts == CountsCost && d != 0 {
			args = append(args, i, b.rl, r.tats[i].pr, b.burst, d)
		}
	}
	if len(args) == 2 {
		return nil // nothing to move
	}
	if err := scripts.ThrottleSettle.Run(ctx, t.client, []string{k}, args...).Err(); err != nil {
		return callErr("settle", err)
	}
	t.countSettled(c, actual-r.tats[0].n)
	return nil
}

func (t *Throttle) countSettled(c compiled, d int64) {
	if d == 0 {
		return
	}
	if d < 0 {
		t.metrics.settled.WithLabelValues(c.name, "refund").Add(float64(-d))
	} else {
		t.metrics.settled.WithLabelValues(c.name, "debt").Add(float64(d))
	}
}

// Cost is the estimate r was asked for, in units.
func (r Reservation) Cost() int64 { return r.n }

// settle moves key's local bucket by d units, as throttle_settle.lua does
// on Redis: never below now on a refund.
func (l *localBuckets) settle(key string, c compiled, d int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.tats[key]
	if !ok {
		if d < 0 {
			return
		}
		st = localTAT{tat: now}
	}
	iv := time.Duration(float64(c.pr) / float64(c.rl) / l.share * float64(time.Microsecond))
	old := st.tat
	if old.Before(now) {
		old = now
	}
	tat := old.Add(time.Duration(d) * iv)
	if tat.Before(now) {
		tat = now
	}
	g := max(st.guardEnd.Sub(st.tat), 0)
	st.tat, st.guardEnd = tat, tat.Add(g)
	l.tats[key] = st
}

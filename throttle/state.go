package throttle

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
)

// State is what Redis holds for one key, read without changing it: for a
// page or a command that shows an operator how the fleet paces the key.
type State struct {
	// Now is the clock the scripts decide on (the Redis server's TIME)
	// at the read.
	Now time.Time
	// Share is the part of the Limit's rate the fleet paces at now, from
	// 0 to 1: 1 until the downstream refuses a call (Backoff), then lower,
	// climbing back to Ceiling at 2% of the rate a second.
	Share float64
	// Ceiling is the share Share climbs back to; it creeps back to 1 at
	// 1% a minute.
	Ceiling float64
	// PerSecond is the pace now: the Limit's own rate in units a second
	// times Share.
	PerSecond float64
	// Next is how long until a call of one unit could start, 0 when it
	// could start now: the next free slot, counting a pause and the
	// buckets of Limit.Also.
	Next time.Duration
	// PausedUntil is when the key's pause ends, as Redis stored it (so
	// every read gives the same instant); the zero Time when it is not
	// paused.
	PausedUntil time.Time
	// Leases counts the concurrency leases of the key held now (Acquire),
	// including those of workers that died, until they run out.
	Leases int64
}

// Paused returns how much longer the key is paused, 0 when it is not.
func (s State) Paused() time.Duration {
	if s.PausedUntil.IsZero() {
		return 0
	}
	return max(s.PausedUntil.Sub(s.Now), 0)
}

// State reads key's bucket under lim and its concurrency leases in one
// round trip, booking nothing: the reserve script, peeking, answers the
// next slot, the pause, the share and its ceiling; TIME and ZRANGE the
// clock and the leases still held. A key never used reads as a full
// share, no pause and no leases.
func (t *Throttle) State(ctx context.Context, key string, lim Limit) (State, error) {
	lim.MaxWait = NoWait // the script answers a slot later than now with its delay as the retry
	c, err := lim.compile()
	if err != nil {
		return State{}, err
	}
	rk, err := t.rateKey(key)
	if err != nil {
		return State{}, err
	}
	ck, err := t.key("conc", key)
	if err != nil {
		return State{}, err
	}
	pipe := t.client.Pipeline()
	peek := scripts.ThrottleReserve.Eval(ctx, pipe, []string{rk}, c.reserveArgs(1, false, t.now())...)
	tm := pipe.Time(ctx)
	leases := pipe.ZRangeWithScores(ctx, ck, 0, -1) // scored by their expiry
	if _, err := pipe.Exec(ctx); err != nil {
		return State{}, fmt.Errorf("sluice: throttle state: %w", err)
	}
	v, err := peek.Int64Slice()
	if err != nil || len(v) < 10 {
		return State{}, fmt.Errorf("sluice: throttle state: unexpected reply %v (%v)", v, err)
	}
	now := tm.Val().UnixMicro()
	if t.clock != nil {
		now = t.clock().UnixMicro()
	}
	st := State{Now: time.UnixMicro(now), Share: float64(v[7]) / shareFull, Ceiling: float64(v[8]) / (100 * shareFull),
		Next: time.Duration(v[2]) * time.Microsecond}
	st.PerSecond = c.perSecond(st.Share)
	if v[3] > 0 { // paused for, from the script's clock: its now is the slot less the delay
		st.PausedUntil = time.UnixMicro(v[9] - v[1] + v[3])
	}
	for _, z := range leases.Val() {
		if int64(z.Score) > now {
			st.Leases++
		}
	}
	return st, nil
}

package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
)

// State is what Redis holds for one key, read without changing it: for a
// page or a command that shows an operator how the fleet paces the key.
type State struct {
	// Now is the clock the scripts decide on (the Redis server's TIME,
	// or Options.Clock), at the read.
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
	// PausedUntil is when the key's pause ends, on the Now clock; the
	// zero Time when it is not paused.
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

// State reads key's bucket under lim and its concurrency leases: one
// round trip of three commands (TIME, HMGET of the bucket's hash, ZRANGE
// of the leases: at most the cap, and those run out since the last
// Acquire). It computes
// the share as the reserve script does (prelude.lua's share and paced)
// and books nothing. A key never used reads as a full share, no pause and
// no leases.
func (t *Throttle) State(ctx context.Context, key string, lim Limit) (State, error) {
	c, err := lim.compile()
	if err != nil {
		return State{}, err
	}
	rk, err := t.rateKey(key)
	if err != nil {
		return State{}, err
	}
	ck, err := keyspace.Key(t.prefix, "conc", key)
	if err != nil {
		return State{}, err
	}
	fields := []string{"p", "s", "c", "t", "a", "f"}
	for i := range c.also {
		n := strconv.Itoa(i + 1)
		fields = append(fields, "a"+n, "f"+n)
	}
	pipe := t.client.Pipeline()
	tm := pipe.Time(ctx)
	hm := pipe.HMGet(ctx, rk, fields...)
	// Leases are scored by their expiry: those still running are counted
	// once the clock is known.
	leases := pipe.ZRangeWithScores(ctx, ck, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return State{}, fmt.Errorf("sluice: throttle state: %w", err)
	}
	now := tm.Val().UnixMicro()
	if t.clock != nil {
		now = t.clock().UnixMicro()
	}
	v := make([]int64, len(fields))
	have := make([]bool, len(fields))
	for i, x := range hm.Val() {
		if s, ok := x.(string); ok {
			v[i], _ = strconv.ParseInt(s, 10, 64)
			have[i] = true
		}
	}
	st := State{Now: time.UnixMicro(now), Share: 1, Ceiling: 1}
	if have[0] && v[0] > now {
		st.PausedUntil = time.UnixMicro(v[0])
	}
	sh := int64(shareFull)
	if have[3] {
		var ceil float64
		sh, ceil = share(v[1], v[2], v[3], now)
		st.Share, st.Ceiling = float64(sh)/shareFull, ceil/shareFull
	}
	st.PerSecond = float64(c.rl) / float64(c.pr) * 1e6 * st.Share
	// Each bucket's delay for one unit, as throttle_reserve.lua computes
	// it; the call's is the latest.
	next := int64(0)
	delay := func(rl, pr, burst, n int64, a, f int64, set bool) {
		if !set || a < now {
			a, f = now, 0
		}
		pr = paced(pr, sh)
		early := (a-now)*rl + f + n*pr - burst*pr
		if early > 0 {
			next = max(next, (early+rl-1)/rl)
		}
	}
	delay(c.rl, c.pr, c.burst, 1, v[4], v[5], have[4])
	for i, b := range c.also {
		delay(b.rl, b.pr, b.burst, b.cost(1), v[6+2*i], v[7+2*i], have[6+2*i])
	}
	st.Next = time.Duration(next) * time.Microsecond
	for _, z := range leases.Val() {
		if int64(z.Score) > now {
			st.Leases++
		}
	}
	return st, nil
}

// share is prelude.lua's share: a bucket's adaptive share now, in basis
// points, and its ceiling, from the s, c, t a slow-down left at t.
func share(s, c, at, now int64) (int64, float64) {
	const climb, creep = 200.0 / 1e6, 100.0 / 60e6 // a µs: 2% a second, 1% a minute
	dt := float64(max(now-at, 0))
	cn := math.Min(shareFull, float64(c)+dt*creep)
	sn := math.Min(cn, float64(s)+dt*climb)
	return int64(math.Floor(sn)), cn
}

// paced is prelude.lua's paced: the emission interval's numerator pr at
// share sh.
func paced(pr, sh int64) int64 {
	if sh >= shareFull {
		return pr
	}
	return int64(math.Ceil(float64(pr) * shareFull / float64(sh)))
}

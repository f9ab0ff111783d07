package throttle

import (
	"time"
)

// A queue may book a key's slots itself, in the script that hands its jobs
// to workers, rather than have each worker book its job's slot with a
// round trip of its own (docs/throttle.md, Slots booked by the claim). It
// books on the key's bucket hash (BucketKey) with the same rule as
// Reserve, and only for a Limit of one bucket
// (ClaimBucket); the worker then adopts the slot with Claimed.

// ClaimBucket returns what a script needs to book lim's slots as Reserve
// does (rl and pr, the rate as rl units per pr µs; the burst; the guard
// in µs), or false when lim cannot be booked that way: it has further
// buckets (Also) or is invalid.
func ClaimBucket(lim Limit) (rl, pr, burst, guard int64, ok bool) {
	c, err := lim.compile()
	if err != nil || len(c.also) > 0 {
		return 0, 0, 0, 0, false
	}
	return c.rl, c.pr, c.burst, c.guard, true
}

// BucketKey returns the name of the Redis hash that holds key's bucket.
func (t *Throttle) BucketKey(key string) (string, error) { return t.rateKey(key) }

// Claimed returns the reservation of n units of key that a queue's script
// booked at slot (µs, on the Redis server's clock), delay µs after the
// booking, under lim. The caller, which received it after the booking,
// sleeps its Delay from now (Await) and calls: never before the slot. It
// reports false when the slot must not be used: a pause this process has
// heard of ends after it, or the slot is older than a late slot may be
// (Await), on Redis's clock as this host estimates it (the host's clock
// and the offset that Redis's TIME showed, the quickest of three round
// trips, asked again in the background every 30 s); the caller then
// books again (Wait). A claimed reservation is settled as any other
// (Settle), with the key's interval at the whole rate, and is never given
// back (Cancel reports false).
func (t *Throttle) Claimed(key string, lim Limit, n, slot, delay int64) (Reservation, bool) {
	c, err := lim.compile()
	if err != nil {
		return Reservation{}, false
	}
	now := t.hostNow()
	r := Reservation{OK: true, Delay: time.Duration(delay) * time.Microsecond, Share: 1, key: key, n: n, tats: []tat{{pr: c.pr, n: n}}, queued: true, claimed: true,
		booked: now, compile: c, slot: slot}
	if e, _ := t.pauses.get(key); e.voids(r, now.Add(r.Delay), now) {
		return Reservation{}, false
	}
	// The slot is on the server's clock, and so is the check: the host's
	// clock corrected by the offset a TIME round trip measured.
	if t.serverNow(now).Sub(time.UnixMicro(slot)) > r.maxLate() {
		t.metrics.reservations.WithLabelValues(c.name, "late").Inc()
		return Reservation{}, false
	}
	t.metrics.reservations.WithLabelValues(c.name, "claimed").Inc()
	return r, true
}

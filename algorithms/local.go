package algorithms

import (
	"context"
	"maps"
	"sync"
	"time"
)

// LocalOptions configures NewLocal. A nil *LocalOptions means defaults.
type LocalOptions struct {
	// Clock returns the current time; default time.Now. Decisions depend
	// only on its readings.
	Clock func() time.Time
}

// Local is an in-process Limiter: the reference model of each algorithm.
// Its entries expire when they become equivalent to no state, as the Redis
// keys do, so memory stays proportional to the keys active within one
// period. If its clock steps back, it decides at the latest time an AllowN
// has seen. Safe for concurrent use.
type Local struct {
	p      Policy
	c      params
	clock  func() time.Time
	mu     sync.Mutex
	keys   map[string]localEntry
	last   int64 // the latest time (µs) of a consuming call
	sweep  int64 // the next time (µs) to drop expired entries
	sweepN int   // the map size that triggers an early sweep
}

type localEntry struct {
	state   any   // as step.next
	expires int64 // µs; the entry is gone at or after this time
}

// NewLocal returns an in-process limiter for p, or an error wrapping
// ErrInvalidPolicy that names the wrong field.
func NewLocal(p Policy, opts *LocalOptions) (*Local, error) {
	c, err := compile(p)
	if err != nil {
		return nil, err
	}
	l := &Local{p: p, c: c, clock: time.Now, keys: make(map[string]localEntry), sweepN: 1024}
	if opts != nil && opts.Clock != nil {
		l.clock = opts.Clock
	}
	return l, nil
}

// Policy returns the policy l enforces.
func (l *Local) Policy() Policy { return l.p }

// AllowN admits n units for key, or refuses them without consuming.
func (l *Local) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	return l.do(ctx, key, n, true)
}

// PeekN reports what AllowN would decide now, without consuming.
func (l *Local) PeekN(ctx context.Context, key string, n int64) (Decision, error) {
	return l.do(ctx, key, n, false)
}

// Reset forgets key.
func (l *Local) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrInvalidKey
	}
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
	return nil
}

func (l *Local) do(ctx context.Context, key string, n int64, consume bool) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if err := l.c.check(key, n); err != nil {
		return Decision{}, err
	}
	now := l.clock().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	// The clock may step back (NTP, a test): decide at the latest time a
	// consuming call has seen, so that nothing is admitted twice.
	if now < l.last {
		now = l.last
	}
	if consume {
		l.last = now
		l.maybeSweep(now)
	}
	var state any
	if e := l.keys[key]; now < e.expires {
		state = e.state
	}
	s := impls[l.c.alg].eval(&l.c, state, now, n, consume)
	switch {
	case s.write && s.next == nil:
		delete(l.keys, key)
	case s.write:
		// Gone when the Redis key would be: PEXPIRE in ms, rounded up, at least 1.
		l.keys[key] = localEntry{state: s.next, expires: now + max(ceilDiv(s.ttl, 1000), 1)*1000}
	}
	return s.res.decision(l.c.capacity), nil
}

// maybeSweep drops expired entries once a second, or sooner when the map
// has doubled since the last sweep. Callers hold l.mu.
func (l *Local) maybeSweep(now int64) {
	if now < l.sweep && len(l.keys) < l.sweepN {
		return
	}
	maps.DeleteFunc(l.keys, func(_ string, e localEntry) bool { return now >= e.expires })
	l.sweep = now + int64(time.Second/time.Microsecond)
	l.sweepN = max(2*len(l.keys), 1024)
}

func (r result) decision(limit int64) Decision {
	return Decision{
		Allowed:    r.allowed,
		Limit:      limit,
		Remaining:  r.remaining,
		ResetAfter: time.Duration(r.reset) * time.Microsecond,
		RetryAfter: time.Duration(r.retry) * time.Microsecond,
	}
}

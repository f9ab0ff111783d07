package throttle

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
)

// DefaultLease is how long a concurrency slot is held when
// Concurrency.Lease is zero.
const DefaultLease = 30 * time.Second

// Concurrency caps how many calls to a key run at once, fleet-wide.
type Concurrency struct {
	// Name labels the key's metrics; keep it to a bounded set.
	Name string
	// Max is the number of calls that may run at once. At least 1.
	Max int64
	// Lease is how long a slot stays taken if its holder neither releases
	// nor extends it. Default DefaultLease.
	Lease time.Duration
}

// BusyError is returned by Acquire when every slot is leased.
type BusyError struct {
	Key        string
	InUse      int64
	RetryAfter time.Duration // when the earliest lease runs out, at the latest
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: key %q, %d in use, retry after %v", ErrBusy, e.Key, e.InUse, e.RetryAfter)
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// Lease is one held concurrency slot.
type Lease struct {
	t    *Throttle
	name string // the caller's key, as BusyError reports it
	key  string // the Redis key
	id   string
	c    Concurrency
	life int64 // µs
}

// Acquire leases one of c.Max slots of key, or returns a *BusyError when
// all are taken. Release the lease when the call ends.
func (t *Throttle) Acquire(ctx context.Context, key string, c Concurrency) (*Lease, error) {
	if c.Max < 1 {
		return nil, fmt.Errorf("sluice: throttle: Concurrency.Max must be at least 1, got %d", c.Max)
	}
	if c.Lease < 0 {
		return nil, fmt.Errorf("sluice: throttle: Concurrency.Lease must not be negative, got %v", c.Lease)
	}
	c.Lease, c.Name = cmp.Or(c.Lease, DefaultLease), cmp.Or(c.Name, "default")
	k, err := t.key("conc", key)
	if err != nil {
		return nil, err
	}
	l := &Lease{t: t, name: key, key: k, id: rand.Text(), c: c, life: int64((c.Lease + time.Microsecond - 1) / time.Microsecond)}
	if t.pairs != nil {
		t.pairs.leased(key, t.hostNow())
	}
	if err := l.Extend(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Extend renews the lease for another Concurrency.Lease from now. It
// fails with a *BusyError if the lease had already run out and its slot
// was taken by someone else.
func (l *Lease) Extend(ctx context.Context) error {
	v, err := scripts.ThrottleAcquire.Run(ctx, l.t.client, []string{l.key},
		l.c.Max, l.id, l.life, l.t.now()).Int64Slice()
	if err != nil {
		return callErr("acquire", err)
	}
	if len(v) != 3 {
		return fmt.Errorf("sluice: throttle acquire: unexpected reply of %d values", len(v))
	}
	l.t.metrics.leased.WithLabelValues(l.c.Name).Set(float64(v[1]))
	if v[0] != 1 {
		return &BusyError{Key: l.name, InUse: v[1], RetryAfter: time.Duration(v[2]) * time.Microsecond}
	}
	return nil
}

// Release gives the slot back, and wakes a caller of AcquireWait for the
// same key (in other processes, through pub/sub when they subscribe).
func (l *Lease) Release(ctx context.Context) error {
	err := scripts.ThrottleRelease.Run(ctx, l.t.client, []string{l.key},
		l.id, l.c.Max, l.t.releaseChannel(), l.name).Err()
	if !l.t.subscribed {
		// A subscribed process hears its own announcement and wakes its
		// first waiter then: waking one here too would send two waiters
		// after the one slot.
		l.t.releases.notify(l.name)
	}
	if err != nil {
		return callErr("release", err)
	}
	return nil
}

// AcquireWait leases one of c.Max slots of key, waiting up to maxWait
// for one to be released, else returning the last *BusyError; a maxWait
// of zero or less tries once. It looks again at a release it hears of,
// when the earliest lease runs out, or after a poll interval (100 ms;
// 1 s with Options.Subscribe).
func (t *Throttle) AcquireWait(ctx context.Context, key string, c Concurrency, maxWait time.Duration) (*Lease, error) {
	deadline := t.hostNow().Add(maxWait)
	for {
		// Take a place in the line before asking, so that a release
		// between the refusal and the wait is not missed.
		woken, leave := t.releases.wait(key)
		l, err := t.Acquire(ctx, key, c)
		var busy *BusyError
		if !errors.As(err, &busy) {
			leave()
			return l, err
		}
		left := deadline.Sub(t.hostNow())
		if left <= 0 {
			leave()
			return nil, busy
		}
		d := min(left, t.leasePoll)
		if busy.RetryAfter > 0 {
			d = min(d, busy.RetryAfter)
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			leave()
			return nil, ctx.Err()
		case <-woken:
			timer.Stop()
		case <-timer.C:
			leave()
		}
	}
}

// releaseChannel is the pub/sub channel of releases; the message is the key.
func (t *Throttle) releaseChannel() string { return t.prefix + ":releases" }

// releaseLine holds, per key, the callers of AcquireWait waiting for a
// lease, in order: each release wakes the first.
type releaseLine struct {
	mu      sync.Mutex
	waiting map[string][]chan struct{}
}

// wait joins key's line. The channel is closed when this caller's turn
// comes; leave takes it out of the line if it stops waiting first.
func (r *releaseLine) wait(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.waiting[key] = append(r.waiting[key], ch)
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.set(key, slices.DeleteFunc(r.waiting[key], func(c chan struct{}) bool { return c == ch }))
	}
}

// notify wakes the first caller waiting for a lease of key, if any.
func (r *releaseLine) notify(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if line := r.waiting[key]; len(line) > 0 {
		close(line[0])
		r.set(key, line[1:])
	}
}

// set stores key's line, or forgets it when empty. Callers hold r.mu.
func (r *releaseLine) set(key string, line []chan struct{}) {
	if len(line) == 0 {
		delete(r.waiting, key)
	} else {
		r.waiting[key] = line
	}
}

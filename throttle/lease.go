package throttle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/keyspace"
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
	// nor extends it (a worker that died). Default DefaultLease; use more
	// than the longest call, or Extend.
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
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Name == "" {
		c.Name = "default"
	}
	if key == "" {
		return nil, fmt.Errorf("sluice: throttle: empty key")
	}
	k, err := keyspace.Key(t.prefix, "conc", key)
	if err != nil {
		return nil, err
	}
	var raw [12]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	l := &Lease{t: t, name: key, key: k, id: hex.EncodeToString(raw[:]), c: c, life: int64((c.Lease + time.Microsecond - 1) / time.Microsecond)}
	taken, err := l.run(ctx)
	if err != nil {
		return nil, err
	}
	if taken != nil {
		return nil, &BusyError{Key: key, InUse: taken[1], RetryAfter: time.Duration(taken[2]) * time.Microsecond}
	}
	return l, nil
}

// run takes or renews the lease; it returns the reply when refused.
func (l *Lease) run(ctx context.Context) ([]int64, error) {
	v, err := scripts.ThrottleAcquire.Run(ctx, l.t.client, []string{l.key},
		l.c.Max, l.id, l.life, l.t.now()).Int64Slice()
	if err != nil {
		if unreachable(err) {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("sluice: throttle acquire: %w", err)
	}
	if len(v) != 3 {
		return nil, fmt.Errorf("sluice: throttle acquire: unexpected reply of %d values", len(v))
	}
	l.t.metrics.inUse(l.c.Name, v[1])
	if v[0] != 1 {
		return v, nil
	}
	return nil, nil
}

// Extend renews the lease for another Concurrency.Lease from now. It
// fails with a *BusyError if the lease had already run out and its slot
// was taken by someone else.
func (l *Lease) Extend(ctx context.Context) error {
	refused, err := l.run(ctx)
	if err != nil {
		return err
	}
	if refused != nil {
		return &BusyError{Key: l.name, InUse: refused[1], RetryAfter: time.Duration(refused[2]) * time.Microsecond}
	}
	return nil
}

// Release gives the slot back.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.t.client.ZRem(ctx, l.key, l.id).Err(); err != nil {
		return fmt.Errorf("sluice: throttle release: %w", err)
	}
	return nil
}

// ID returns the lease's identifier, for logs.
func (l *Lease) ID() string { return l.id }

package throttle

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
)

// DefaultLease is how long a concurrency slot is held when
// Concurrency.Lease is zero.
const DefaultLease = 30 * time.Second

// MinLease is the shortest Concurrency.Lease: a kept lease is extended
// every third of it, a script each time, which must return well within
// the lease.
const MinLease = 100 * time.Millisecond

// Concurrency caps how many calls to a key run at once, fleet-wide.
type Concurrency struct {
	// Name labels the key's metrics; keep it to a bounded set.
	Name string
	// Max is the number of calls that may run at once. At least 1.
	Max int64
	// Lease is how long a slot stays taken if its holder neither releases
	// nor extends it: how soon a worker that died gives its slot back.
	// Lease.Keep extends it every third of it while the call runs, so a
	// call may run longer. Default DefaultLease; at least MinLease.
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

// ErrLeaseLost is wrapped by *LostError.
var ErrLeaseLost = errors.New("sluice: concurrency lease lost")

// LostError says that a lease could not be extended: it had run out (or
// been given back) when Extend asked, or Redis could not be asked before
// it would run out. Its slot may serve another call: the call it guarded
// must end (Keep's context ends with it as its cause).
type LostError struct {
	Key string
	Err error // why: Redis's answer, or the error of the last attempt
}

func (e *LostError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%v: key %q: it had run out", ErrLeaseLost, e.Key)
	}
	return fmt.Sprintf("%v: key %q: %v", ErrLeaseLost, e.Key, e.Err)
}

// Unwrap returns ErrLeaseLost and the reason.
func (e *LostError) Unwrap() []error { return []error{ErrLeaseLost, e.Err} }

// Lease is one held concurrency slot.
type Lease struct {
	t    *Throttle
	name string // the caller's key, as BusyError reports it
	key  string // the Redis key
	id   string
	c    Concurrency
	life int64 // µs
	// until is when the lease runs out at the earliest, on the host's
	// clock (UnixNano): the last successful acquire or extend's send time
	// plus the lease.
	until atomic.Int64
	// Keep's keeper: stop ends it, done is closed when it has.
	mu     sync.Mutex
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelCauseFunc
}

// Acquire leases one of c.Max slots of key, or returns a *BusyError when
// all are taken; it never waits. Release the lease when the call ends,
// and Keep it for as long as the call runs.
func (t *Throttle) Acquire(ctx context.Context, key string, c Concurrency) (*Lease, error) {
	if c.Max < 1 {
		return nil, fmt.Errorf("sluice: throttle: Concurrency.Max must be at least 1, got %d", c.Max)
	}
	if c.Lease != 0 && c.Lease < MinLease {
		return nil, fmt.Errorf("sluice: throttle: Concurrency.Lease must be at least %v (or 0 for %v), got %v", MinLease, DefaultLease, c.Lease)
	}
	c.Lease, c.Name = cmp.Or(c.Lease, DefaultLease), cmp.Or(c.Name, "default")
	k, err := t.key("conc", key)
	if err != nil {
		return nil, err
	}
	l := &Lease{t: t, name: key, key: k, id: rand.Text(), c: c, life: int64((c.Lease + time.Microsecond - 1) / time.Microsecond)}
	if err := l.run(ctx, false); err != nil {
		return nil, err
	}
	return l, nil
}

// Extend renews the lease for another Concurrency.Lease from now. It
// fails with a *LostError if the lease had already run out (or been given
// back): its slot may have served another call since, so it is never
// taken again. Keep extends a lease by itself.
func (l *Lease) Extend(ctx context.Context) error {
	return l.run(ctx, true)
}

// run takes the lease (extend false) or extends it.
func (l *Lease) run(ctx context.Context, extend bool) error {
	sent := l.t.hostNow()
	v, err := scripts.ThrottleAcquire.Run(ctx, l.t.client, []string{l.key},
		l.c.Max, l.id, l.life, l.t.now(), extend).Int64Slice()
	if err != nil {
		return callErr("acquire", err)
	}
	if len(v) != 3 {
		return fmt.Errorf("sluice: throttle acquire: unexpected reply of %d values", len(v))
	}
	l.t.metrics.leased.WithLabelValues(l.c.Name).Set(float64(v[1]))
	switch v[0] {
	case 1:
		l.until.Store(sent.Add(l.c.Lease).UnixNano())
		return nil
	case 2:
		return &LostError{Key: l.name}
	}
	return &BusyError{Key: l.name, InUse: v[1], RetryAfter: time.Duration(v[2]) * time.Microsecond}
}

// Keep holds the lease for as long as the call it guards runs: until
// Release, it extends the lease every third of Concurrency.Lease in the
// background. It returns ctx for the call: it ends when the lease is lost
// (an extension answered that it had run out, or Redis could not be asked
// for one before a sixth of the lease was left), with a *LostError as its
// context.Cause, so that the call ends while its slot is still its own
// and the downstream never sees more calls than the cap. A loss is
// logged and counted in sluice_throttle_leases_lost_total. Call Keep at
// most once a lease.
func (l *Lease) Keep(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		panic("sluice: throttle: Lease.Keep called twice")
	}
	l.stop, l.done, l.cancel = make(chan struct{}), make(chan struct{}), cancel
	go l.keep(ctx, cancel)
	return ctx
}

// keep extends the lease until stop, or until it is lost.
func (l *Lease) keep(ctx context.Context, cancel context.CancelCauseFunc) {
	defer close(l.done)
	every := l.c.Lease / 3
	for {
		until := time.Unix(0, l.until.Load())
		if !l.sleep(ctx, until.Add(-2*every).Sub(l.t.hostNow())) {
			return
		}
		// Give up while a sixth of the lease is left, so that the call
		// ends before its slot can be taken.
		giveUp := until.Add(-l.c.Lease / 6)
		var last error // the reason to report: not the deadline of the last try
		for {
			ectx, ecancel := context.WithDeadline(context.WithoutCancel(ctx), giveUp)
			err := l.Extend(ectx)
			ecancel()
			if err == nil {
				break
			}
			if last == nil || !errors.Is(err, context.DeadlineExceeded) {
				last = err
			}
			if errors.Is(err, ErrLeaseLost) || !l.t.hostNow().Before(giveUp) {
				l.lose(cancel, last)
				return
			}
			if !l.sleep(ctx, min(every/4, giveUp.Sub(l.t.hostNow()))) {
				return
			}
		}
	}
}

// sleep waits d; it reports false if the keeper must end first (Release,
// or the call's context ended).
func (l *Lease) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-l.stop:
		return false
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// lose ends the call of a lease that could not be extended.
func (l *Lease) lose(cancel context.CancelCauseFunc, err error) {
	lost, ok := err.(*LostError)
	if !ok {
		lost = &LostError{Key: l.name, Err: err}
	}
	l.t.metrics.lost.WithLabelValues(l.c.Name).Inc()
	l.t.log.Warn("sluice: concurrency lease lost; cancelling its call", "throttle", l.c.Name, "err", lost)
	cancel(lost)
}

// Release stops keeping the lease (Keep) and gives the slot back, which
// wakes a caller waiting for a lease of the same key (WaitAcquire,
// WatchReleases), in other processes through pub/sub when they subscribe.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.stop != nil {
		select {
		case <-l.stop:
		default:
			close(l.stop)
		}
	}
	done, cancel := l.done, l.cancel
	l.mu.Unlock()
	if done != nil {
		<-done
		cancel(errReleased)
	}
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

// errReleased ends Keep's context when its lease is given back.
var errReleased = errors.New("sluice: concurrency lease given back")

// WaitAcquire books key's next slot for n units under lim and sleeps
// until it, as Wait does, and then leases one of c.Max slots: the lease
// is never held while the call sleeps for its slot or a pause. If every
// lease is held when the slot comes, the slot is given back (when Cancel
// can; else it stays a gap) and WaitAcquire waits for a lease to be given
// back, woken by the release (anywhere in the fleet), when the earliest
// lease runs out, or after a poll interval (1 s; 100 ms while Redis
// pub/sub could not be subscribed to); then it books again.
// After lim.WaitLimit() of waiting for leases it returns the last
// *BusyError; a slot too far away returns a *TooFarError as Wait does.
// Keep and Release the lease it returns.
func (t *Throttle) WaitAcquire(ctx context.Context, key string, lim Limit, n int64, c Concurrency) (Reservation, *Lease, error) {
	deadline := t.hostNow().Add(lim.WaitLimit())
	for {
		r, err := t.Wait(ctx, key, lim, n)
		if err != nil {
			return r, nil, err
		}
		// Take a place in the line before asking, so that a release
		// between the refusal and the wait is not missed.
		woken, leave := t.releases.wait(key)
		l, err := t.Acquire(ctx, key, c)
		var busy *BusyError
		if !errors.As(err, &busy) {
			leave()
			if err != nil {
				t.cancelUnused(ctx, r)
			}
			return r, l, err
		}
		t.cancelUnused(ctx, r)
		left := deadline.Sub(t.hostNow())
		if left <= 0 {
			leave()
			return r, nil, busy
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
			return r, nil, ctx.Err()
		case <-woken:
			timer.Stop()
		case <-timer.C:
			leave()
		}
	}
}

// cancelUnused gives back the slot of a call that will not be made.
func (t *Throttle) cancelUnused(ctx context.Context, r Reservation) {
	if _, err := t.Cancel(context.WithoutCancel(ctx), r); err != nil {
		t.log.Warn("sluice: cancelling an unused slot failed", "err", err)
	}
}

// ReleaseWatch counts the releases of one key that this process hears
// of (its own, and others'), for callers that keep
// jobs waiting for a lease elsewhere than in a goroutine (the queue's
// waiting room) and wake them at each release. Unlike a waiter of
// WaitAcquire, a watch misses no release while its owner is busy.
type ReleaseWatch struct {
	// C receives a value when releases were heard since the last Take.
	C    <-chan struct{}
	w    *watcher
	stop func()
}

// Take returns how many releases were heard since the last Take.
func (r *ReleaseWatch) Take() int { return int(r.w.n.Swap(0)) }

// Stop ends the watch.
func (r *ReleaseWatch) Stop() { r.stop() }

// WatchReleases starts a watch of key's releases; Stop it when done.
func (t *Throttle) WatchReleases(key string) *ReleaseWatch {
	w := &watcher{ch: make(chan struct{}, 1)}
	return &ReleaseWatch{C: w.ch, w: w, stop: t.releases.watch(key, w)}
}

// watcher is one ReleaseWatch's end in the releaseLine.
type watcher struct {
	n  atomic.Int64
	ch chan struct{}
}

// releaseChannel is the pub/sub channel of releases; the message is the key.
func (t *Throttle) releaseChannel() string { return t.prefix + ":releases" }

// releaseLine holds, per key, the callers of WaitAcquire
// waiting for a lease, in order: each release wakes the first.
type releaseLine struct {
	mu       sync.Mutex
	waiting  map[string][]chan struct{}
	watchers map[string][]*watcher // every release of a key counts in each
}

// watch adds w to key's watchers; the func returned takes it out.
func (r *releaseLine) watch(key string, w *watcher) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers == nil {
		r.watchers = map[string][]*watcher{}
	}
	r.watchers[key] = append(r.watchers[key], w)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ws := slices.DeleteFunc(r.watchers[key], func(x *watcher) bool { return x == w }); len(ws) > 0 {
			r.watchers[key] = ws
		} else {
			delete(r.watchers, key)
		}
	}
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

// notify wakes the first caller waiting for a lease of key, if any, and
// counts the release in key's watchers.
func (r *releaseLine) notify(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.watchers[key] {
		w.n.Add(1)
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
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

// InUse returns how many leases of key are held now, fleet-wide (on
// Redis's clock).
func (t *Throttle) InUse(ctx context.Context, key string) (int64, error) {
	k, err := t.key("conc", key)
	if err != nil {
		return 0, err
	}
	var now time.Time
	if t.clock != nil {
		now = t.clock()
	} else if now, err = t.client.Time(ctx).Result(); err != nil {
		return 0, callErr("in use", err)
	}
	n, err := t.client.ZCount(ctx, k, "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf").Result()
	if err != nil {
		return 0, callErr("in use", err)
	}
	return n, nil
}

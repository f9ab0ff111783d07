// Package throttle paces outbound calls across a whole fleet of workers.
//
// A Throttle shares one bucket per key in Redis. A caller reserves the next
// slot of the bucket and sleeps until it (GCRA, the leaky bucket as a
// queue), so that calls leave every worker on every host evenly spaced at
// the key's rate; a slot further away than the Limit's MaxWait is not
// taken, and the caller learns when to come back. A Burst above 1 gives
// token-bucket behaviour for APIs that allow bursts. Calls may cost more
// than one unit, for APIs that charge points per call. A Limit may list
// further rates (Limit.Also) that every call keeps as well, for APIs that
// state several limits: 10 a second and 1,000 an hour, or requests and
// tokens a minute.
//
// The three verbs follow golang.org/x/time/rate: Allow takes a slot only if
// it is due now, Reserve books the next one and says how long to wait, and
// Wait books and sleeps. Pause stops the whole fleet calling a key until a
// time (a 429 with Retry-After); calls resume one interval apart, not all
// at once. Acquire leases one of a fixed number of concurrency slots, for
// APIs that cap parallel calls; a dead worker's lease runs out by itself.
//
// Every decision is taken by one Lua script on the Redis server's clock;
// workers only sleep for the durations the server returns, so hosts whose
// clocks disagree still space their calls correctly.
//
// When Redis cannot be reached, a Throttle fails closed by default: no
// slot, an error wrapping ErrUnavailable, and the caller retries later.
// Options.Fallback instead paces each key in process at a share of its
// rate. docs/throttle.md has the details and the measured figures.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/ratio"
	"github.com/sluicehq/sluice/internal/scripts"
)

// Defaults.
const (
	// DefaultPrefix starts every key a Throttle writes.
	DefaultPrefix = "sluice:th"
	// DefaultMaxWait is the longest a reserved slot may be away when
	// Limit.MaxWait is zero.
	DefaultMaxWait = 10 * time.Second
	// LeasePoll is how often AcquireWait asks Redis again for a lease
	// when it cannot hear other processes' releases (Options.Subscribe
	// off); releases in this process wake it at once.
	LeasePoll = 100 * time.Millisecond
	// LeasePollSubscribed is the same when releases are heard through
	// pub/sub: only a safety net for a lost message.
	LeasePollSubscribed = time.Second
)

// Limit is the pace of one throttle key: Rate units per Per, with bursts
// of up to Burst units.
type Limit struct {
	// Name labels the key's metrics. Keep it to a bounded set, such as
	// the downstream's name; never a tenant id. Default "default".
	Name string
	// Rate units are allowed per Per. Required.
	Rate int64
	// Per is the period of Rate; default one second.
	Per time.Duration
	// Burst is how many units may start at once after an idle spell. The
	// default, 1, spaces every call evenly (the leaky bucket); larger
	// values behave as a token bucket of that size.
	Burst int64
	// MaxWait is the furthest a slot may be: a call whose slot would be
	// later is not given one. Default DefaultMaxWait; negative means only
	// a slot that is due now.
	MaxWait time.Duration
	// Also lists further rates the key must keep to as well, for APIs
	// that state several limits (10 a second and 1,000 an hour;
	// requests and tokens a minute). Each is a bucket of its own in the
	// key's hash; a call takes a slot in all of them at once, at the
	// latest of the slots each would give it. The pause and the adaptive
	// share apply to every bucket; the local fallback (Options.Fallback)
	// paces only the Limit's own rate. At most MaxAlso rates.
	Also []Rate
}

// WaitLimit is how long a call may wait under l, for its slot or for a
// concurrency lease: MaxWait, DefaultMaxWait when it is zero, and no wait
// at all when it is negative.
func (l Limit) WaitLimit() time.Duration {
	if l.MaxWait == 0 {
		return DefaultMaxWait
	}
	return max(l.MaxWait, 0)
}

// PerSecond returns a Limit of n evenly spaced units per second.
func PerSecond(n int64) Limit { return Limit{Rate: n, Per: time.Second} }

// MaxAlso is the most rates Limit.Also may list.
const MaxAlso = 4

// Rate is one further limit of a key (Limit.Also): Rate units per Per,
// with bursts of up to Burst units, validated as the Limit's own.
type Rate struct {
	// Rate units are allowed per Per. Required.
	Rate int64
	// Per is the period of Rate; default one second.
	Per time.Duration
	// Burst is how many units may start at once after an idle spell;
	// default 1, every call evenly spaced. An hourly quota usually wants
	// a burst: with 1,000 an hour and Burst 1, calls are 3.6 s apart.
	Burst int64
	// Counts says what a call takes from this bucket: its cost (the
	// default, as the Limit's own rate does) or one unit per call.
	Counts Counts
}

// Counts says what a call takes from a Rate's bucket.
type Counts int

const (
	// CountsCost takes the call's cost, n units (the default): tokens a
	// minute, when the cost is the call's tokens.
	CountsCost Counts = iota
	// CountsCalls takes one unit per call whatever its cost: requests a
	// minute, beside a rate of tokens a minute.
	CountsCalls
)

// String returns "cost" or "calls".
func (c Counts) String() string {
	switch c {
	case CountsCost:
		return "cost"
	case CountsCalls:
		return "calls"
	}
	return fmt.Sprintf("Counts(%d)", int(c))
}

// String describes the rate, as "20 per 10s, burst 5, counting calls".
func (r Rate) String() string {
	per := r.Per
	if per == 0 {
		per = time.Second
	}
	s := fmt.Sprintf("%d per %v", r.Rate, per)
	if r.Burst > 1 {
		s += fmt.Sprintf(", burst %d", r.Burst)
	}
	if r.Counts == CountsCalls {
		s += ", counting calls"
	}
	return s
}

// compiled is a validated Limit in the units of the scripts.
type compiled struct {
	name    string
	rl, pr  int64 // rate in lowest terms: rl units per pr µs
	burst   int64
	maxWait int64 // µs
	args    [3]string
	also    []bucket // Limit.Also
}

// bucket is one validated Rate of Limit.Also.
type bucket struct {
	rate   Rate // as given, with Per and Burst filled in
	rl, pr int64
	burst  int64
	calls  bool // one unit per call, not the cost
	args   [3]string
}

// cost is what a call of cost n takes from b.
func (b bucket) cost(n int64) int64 {
	if b.calls {
		return 1
	}
	return n
}

// gcra validates a rate as the scripts' GCRA bucket and returns it in
// lowest terms.
func gcra(rate int64, per time.Duration, burst int64) (rl, pr int64, err error) {
	p := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: rate, Period: per, Burst: burst}
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	rl, pr = ratio.Reduce(rate, int64(per/time.Microsecond))
	return rl, pr, nil
}

func ints(a, b, c int64) [3]string {
	return [3]string{strconv.FormatInt(a, 10), strconv.FormatInt(b, 10), strconv.FormatInt(c, 10)}
}

func (l Limit) compile() (compiled, error) {
	per := l.Per
	if per == 0 {
		per = time.Second
	}
	burst := l.Burst
	if burst == 0 {
		burst = 1
	}
	c := compiled{name: l.Name, burst: burst}
	var err error
	if c.rl, c.pr, err = gcra(l.Rate, per, burst); err != nil {
		return compiled{}, err
	}
	if len(l.Also) > MaxAlso {
		return compiled{}, fmt.Errorf("%w: Also lists %d rates; at most %d", algorithms.ErrInvalidPolicy, len(l.Also), MaxAlso)
	}
	for i, r := range l.Also {
		if r.Per == 0 {
			r.Per = time.Second
		}
		if r.Burst == 0 {
			r.Burst = 1
		}
		if r.Counts != CountsCost && r.Counts != CountsCalls {
			return compiled{}, fmt.Errorf("%w: Also[%d]: unknown Counts %d", algorithms.ErrInvalidPolicy, i, int(r.Counts))
		}
		b := bucket{rate: r, burst: r.Burst, calls: r.Counts == CountsCalls}
		if b.rl, b.pr, err = gcra(r.Rate, r.Per, r.Burst); err != nil {
			return compiled{}, fmt.Errorf("Also[%d]: %w", i, err)
		}
		b.args = ints(b.rl, b.pr, b.burst)
		c.also = append(c.also, b)
	}
	if c.name == "" {
		c.name = "default"
	}
	switch {
	case l.MaxWait == 0:
		c.maxWait = int64(DefaultMaxWait / time.Microsecond)
	case l.MaxWait > 0:
		c.maxWait = int64(l.MaxWait / time.Microsecond)
	}
	c.args = ints(c.rl, c.pr, c.burst)
	return c, nil
}

// Errors. Errors with details wrap these; test with errors.Is and errors.As.
var (
	// ErrUnavailable: Redis could not be reached and no fallback is
	// configured. No slot was taken; retry later.
	ErrUnavailable = errors.New("sluice: throttle unavailable: redis unreachable")
	// ErrTooFar is wrapped by *TooFarError.
	ErrTooFar = errors.New("sluice: next slot is further away than the allowed wait")
	// ErrBusy is wrapped by *BusyError.
	ErrBusy = errors.New("sluice: all concurrency slots are leased")
)

// TooFarError is returned by Wait when the key's next slot is further away
// than the Limit's MaxWait (a backlog, or a pause).
type TooFarError struct {
	Key        string
	RetryAfter time.Duration // when a slot within MaxWait may be had
	Paused     time.Duration // the part of the wait due to a pause, if any
}

func (e *TooFarError) Error() string {
	return fmt.Sprintf("%v: key %q, retry after %v", ErrTooFar, e.Key, e.RetryAfter)
}

// Unwrap returns ErrTooFar.
func (e *TooFarError) Unwrap() error { return ErrTooFar }

// Options configures New. A nil *Options means defaults.
type Options struct {
	// Prefix starts every key name; default DefaultPrefix.
	Prefix string
	// Fallback, between 0 and 1, is the share of each key's rate that a
	// process paces by itself while Redis is unreachable. Zero (the
	// default) fails closed: no slot without Redis. With N processes a
	// share of at most 1/N keeps the fleet inside the quota. The fallback
	// paces only the Limit's own rate, not the rates of Limit.Also: with
	// several limits, choose a share that keeps every one of them.
	Fallback float64
	// Metrics receives the throttle's counters; nil for none.
	Metrics *Metrics
	// Logger receives fallback transitions and pause announcements;
	// default slog.Default().
	Logger *slog.Logger
	// Clock, when set, replaces the Redis server's clock in the scripts:
	// slots are booked, and pauses start and end, on it. Waits still
	// sleep in real time, for the delays the scripts return. Only for
	// tests and simulations.
	Clock func() time.Time
	// Subscribe, when true, listens for pauses set by other processes
	// (Redis pub/sub) and wakes this process's waiters at once, so that a
	// slot booked before a pause is not used during it. Default off in the
	// library; cmd/worker turns it on.
	Subscribe bool
}

// Throttle paces calls per key across every process that shares its
// Redis. Safe for concurrent use; create one per process and Close it.
type Throttle struct {
	client   redis.UniversalClient
	prefix   string
	metrics  *Metrics
	log      *slog.Logger
	clock    func() time.Time
	fallback float64
	local    *localBuckets
	pauses   *pauseBoard
	releases *releaseLine
	// leasePoll is how often AcquireWait looks again without news of a
	// release: seldom when releases are heard through pub/sub.
	leasePoll time.Duration
	hostNow   func() time.Time // the host's clock: only for local deadlines
	stop      func()
	wg        sync.WaitGroup
}

// New returns a Throttle on client (a *redis.Client, *redis.ClusterClient
// or any redis.UniversalClient).
func New(client redis.UniversalClient, opts *Options) (*Throttle, error) {
	if client == nil {
		return nil, errors.New("sluice: throttle.New: nil client")
	}
	t := &Throttle{client: client, prefix: DefaultPrefix, log: slog.Default(), hostNow: time.Now}
	if opts != nil {
		if opts.Prefix != "" {
			t.prefix = opts.Prefix
		}
		if opts.Fallback < 0 || opts.Fallback > 1 {
			return nil, fmt.Errorf("sluice: throttle: Fallback must be between 0 and 1, got %v", opts.Fallback)
		}
		t.fallback = opts.Fallback
		t.metrics = opts.Metrics
		if opts.Logger != nil {
			t.log = opts.Logger
		}
		t.clock = opts.Clock
	}
	t.local = newLocalBuckets(t.fallback)
	t.pauses = newPauseBoard()
	t.releases = newReleaseLine()
	t.leasePoll = LeasePoll
	t.stop = func() {}
	if opts != nil && opts.Subscribe {
		t.leasePoll = LeasePollSubscribed
		t.subscribe()
	}
	return t, nil
}

// Close stops listening for pauses. It does not close the Redis client.
func (t *Throttle) Close() error {
	t.stop()
	t.wg.Wait()
	return nil
}

func (t *Throttle) rateKey(key string) (string, error) {
	if key == "" {
		return "", algorithms.ErrInvalidKey
	}
	return keyspace.Key(t.prefix, "rate", key)
}

func (t *Throttle) now() string {
	if t.clock == nil {
		return ""
	}
	return strconv.FormatInt(t.clock().UnixMicro(), 10)
}

// unreachable reports whether err means Redis could not be asked (as
// opposed to Redis answering with an error).
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// Reservation is a slot booked by Reserve, or the reason none was.
type Reservation struct {
	// OK reports whether a slot was booked.
	OK bool
	// Delay is how long from the reservation until the slot: sleep this
	// long, then call. Zero when the slot is due now.
	Delay time.Duration
	// RetryAfter, when !OK, is how long until a slot within MaxWait may be
	// had, if nobody else books one first.
	RetryAfter time.Duration
	// Paused is how much longer the key is paused, at the time of the
	// reservation.
	Paused time.Duration
	// Local reports that Redis was unreachable and the slot was booked by
	// the in-process fallback.
	Local bool

	// Share is the part of the Limit's rate the fleet paced this slot at,
	// from 0 to 1: below 1 after the downstream refused calls (Backoff),
	// climbing back to 1 over time.
	Share float64

	key     string
	n       int64
	a, f    int64 // the bucket's TAT after this reservation, to cancel it
	pr      int64 // the interval's numerator it was paced at (compile.pr at full share)
	queued  bool  // booked on Redis: a and f are set
	booked  time.Time
	compile compiled
	// With Limit.Also: the slot in µs on the scripts' clock, and each
	// further bucket's TAT and pace after this reservation.
	slot int64
	also []tat
}

// tat is a bucket's TAT after a reservation, a + f/rl µs, and the
// interval's numerator pr it was paced at.
type tat struct{ a, f, pr int64 }

// before reports whether r's slot comes before end, an instant in µs on
// the clock the scripts decide on; r must be queued. The slot is read from
// the bucket: a reservation holds the place Burst intervals before the TAT
// it leaves, a + (f - Burst*pr)/rl µs, and starts there, rounded up to a
// µs, or at once if the place has passed.
//
// That is exact for a pause's end. A pause moves the TAT to its end plus
// Burst-1 intervals, so every reservation booked after it holds a place,
// and starts, at or after the end. One booked before it starts at its
// place, or at a time before the pause was set, which is before the end:
// either way it starts before the end just when its place does.
//
// With Limit.Also the slot may be held back by another bucket than the
// Limit's own, so it is read from the reply instead.
func (r Reservation) before(end int64) bool {
	c := r.compile
	if len(c.also) > 0 {
		return r.slot < end
	}
	// ceil(a + (f - burst*pr)/rl) < end  <=>  a + (f - burst*pr)/rl <= end-1
	return (r.a-end+1)*c.rl+r.f-c.burst*r.pr <= 0
}

// voids reports whether the pause e voids r, whose slot is at due on the
// host's clock: the slot must not be used, and another is booked. A slot
// booked on Redis is void if it comes before the pause's end, the two read
// on the scripts' clock, where both were decided: neither the host's clock
// nor how long the replies took plays a part. A pause known only on the
// host's clock (it was set while Redis was unreachable, or announced
// without its end) voids a slot if it ends after it and after now.
func (e pauseEnd) voids(r Reservation, due, now time.Time) bool {
	if !r.queued {
		return e.expires.After(due) && e.expires.After(now)
	}
	if e.at != 0 && r.before(e.at) {
		return true
	}
	return e.guess.After(due) && e.guess.After(now)
}

// Reserve books the next slot for n units of key and returns it without
// waiting. The caller must sleep Delay before calling, or Cancel the
// reservation. A slot further away than lim.MaxWait is not booked.
func (t *Throttle) Reserve(ctx context.Context, key string, lim Limit, n int64) (Reservation, error) {
	return t.reserve(ctx, key, lim, n, true)
}

// Peek reports what Reserve would book now, without booking.
func (t *Throttle) Peek(ctx context.Context, key string, lim Limit, n int64) (Reservation, error) {
	return t.reserve(ctx, key, lim, n, false)
}

// Allow books a slot only if it is due now.
func (t *Throttle) Allow(ctx context.Context, key string, lim Limit, n int64) (Reservation, error) {
	lim.MaxWait = -1
	return t.reserve(ctx, key, lim, n, true)
}

func (t *Throttle) reserve(ctx context.Context, key string, lim Limit, n int64, book bool) (Reservation, error) {
	c, err := lim.compile()
	if err != nil {
		return Reservation{}, err
	}
	if n < 1 || n > c.burst {
		return Reservation{}, fmt.Errorf("%w: cost %d with burst %d", algorithms.ErrCostExceedsCapacity, n, c.burst)
	}
	for i, b := range c.also {
		if b.cost(n) > b.burst {
			return Reservation{}, fmt.Errorf("%w: cost %d with burst %d of Also[%d] (%v)", algorithms.ErrCostExceedsCapacity, n, b.burst, i, b.rate)
		}
	}
	k, err := t.rateKey(key)
	if err != nil {
		return Reservation{}, err
	}
	flag := "0"
	if book {
		flag = "1"
	}
	args := []any{c.args[0], c.args[1], c.args[2], n, c.maxWait, flag, t.now()}
	for _, b := range c.also {
		args = append(args, b.args[0], b.args[1], b.args[2], b.cost(n))
	}
	v, err := scripts.ThrottleReserve.Run(ctx, t.client, []string{k}, args...).Int64Slice()
	// The delay counts from the server's clock when the script ran; the
	// reply arrives later, so counting from its arrival never runs early.
	booked := t.hostNow()
	if err != nil {
		if unreachable(err) && t.fallback > 0 {
			now := t.hostNow() // the local delay counts from now, not from before the failed call
			r := t.local.reserve(key, c, n, book, now)
			r.key, r.n, r.booked, r.compile, r.Share = key, n, now, c, t.fallback
			t.metrics.reserved(c.name, r, true)
			return r, nil
		}
		t.metrics.failed(c.name)
		if unreachable(err) {
			return Reservation{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return Reservation{}, fmt.Errorf("sluice: throttle reserve: %w", err)
	}
	want := 8 // the Limit's own bucket; with Also, the slot and 3 values a bucket
	if len(c.also) > 0 {
		want = 9 + 3*len(c.also)
	}
	if len(v) != want {
		return Reservation{}, fmt.Errorf("sluice: throttle reserve: unexpected reply of %d values", len(v))
	}
	r := Reservation{
		OK:     v[0] == 1,
		Delay:  time.Duration(v[1]) * time.Microsecond,
		Paused: time.Duration(v[3]) * time.Microsecond,
		Share:  float64(v[7]) / shareFull,
		key:    key, n: n, a: v[4], f: v[5], pr: v[6], booked: booked, compile: c,
		queued: book && v[0] == 1,
	}
	if len(c.also) > 0 {
		r.slot = v[8]
		for i := 9; i < len(v); i += 3 {
			r.also = append(r.also, tat{a: v[i], f: v[i+1], pr: v[i+2]})
		}
	}
	if !r.OK {
		r.Delay = 0
		r.RetryAfter = time.Duration(v[2]) * time.Microsecond
	}
	if book {
		t.metrics.reserved(c.name, r, false)
		t.metrics.paced(c, r.Share)
	}
	return r, nil
}

// Cancel gives back a reservation that will not be used. It succeeds only
// while no later reservation has been made on the key (otherwise the slot
// stays spent, a gap in the pace); it reports whether the slot came back.
// The key's next slot never moves back into a pause. With Limit.Also,
// every bucket gives back what the call took from it, except a bucket that
// a pause moved since: its TAT stays at the pause's end.
func (t *Throttle) Cancel(ctx context.Context, r Reservation) (bool, error) {
	if !r.OK || r.Local || r.key == "" {
		return false, nil
	}
	k, err := t.rateKey(r.key)
	if err != nil {
		return false, err
	}
	c := r.compile
	args := []any{c.args[0], r.pr, r.n, strconv.FormatInt(r.a, 10), strconv.FormatInt(r.f, 10), c.args[2]}
	for i, b := range c.also {
		x := r.also[i]
		args = append(args, b.args[0], x.pr, b.cost(r.n), strconv.FormatInt(x.a, 10), strconv.FormatInt(x.f, 10), b.args[2])
	}
	ok, err := scripts.ThrottleCancel.Run(ctx, t.client, []string{k}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("sluice: throttle cancel: %w", err)
	}
	return ok == 1, nil
}

// Wait books the next slot for n units of key and sleeps until it. If the
// slot is further away than lim.MaxWait it returns a *TooFarError at once.
// If ctx ends first, the reservation is cancelled (when it can be) and
// ctx's error returned. A pause announced while it sleeps voids a slot that
// comes before the pause's end; Wait then books again. Slots booked after
// a pause are never void.
func (t *Throttle) Wait(ctx context.Context, key string, lim Limit, n int64) (Reservation, error) {
	for {
		r, err := t.Reserve(ctx, key, lim, n)
		if err != nil {
			return r, err
		}
		if !r.OK {
			return r, &TooFarError{Key: key, RetryAfter: r.RetryAfter, Paused: r.Paused}
		}
		ok, err := t.await(ctx, r)
		if err != nil {
			return r, err
		}
		if ok {
			return r, nil
		}
		// The slot fell inside a pause announced while we slept: book again.
	}
}

// Await sleeps until r's slot, for callers that Reserve, do some work
// while the slot approaches, and then wait for it. It reports false if a
// pause announced in the meantime ends after the slot: the slot must not be
// used; reserve again. If ctx ends first it cancels r (when it can) and
// returns ctx's error.
func (t *Throttle) Await(ctx context.Context, r Reservation) (bool, error) {
	return t.await(ctx, r)
}

func (t *Throttle) await(ctx context.Context, r Reservation) (bool, error) {
	due := r.booked.Add(r.Delay)
	if !t.sleepUntil(ctx, r, due) {
		if _, err := t.Cancel(context.WithoutCancel(ctx), r); err != nil {
			t.log.Warn("sluice: cancelling an unused slot failed", "err", err)
		}
		return false, ctx.Err()
	}
	if e, ok := t.pauses.get(r.key); ok && e.voids(r, due, t.hostNow()) {
		return false, nil
	}
	if r.queued && r.Delay > 0 && t.hostNow().Sub(due) > r.maxLate() {
		// Woken too late to use the slot without bunching with the
		// calls on time after it: leave it as a gap and book again.
		t.metrics.late(r.compile.name)
		return false, nil
	}
	t.metrics.waited(r.compile.name, t.hostNow().Sub(r.booked))
	return true, nil
}

// maxLate is how late a slot may still be used: half of Burst paced
// intervals, and at least 5 ms.
func (r Reservation) maxLate() time.Duration {
	c := r.compile
	return max(time.Duration(c.burst*r.pr/c.rl)*time.Microsecond/2, 5*time.Millisecond)
}

// sleepUntil sleeps until due, r's slot on the host's clock, waking early
// if a pause that voids r is announced. It reports false if ctx ended
// first.
func (t *Throttle) sleepUntil(ctx context.Context, r Reservation, due time.Time) bool {
	for {
		d := due.Sub(t.hostNow())
		if d <= 0 {
			return true
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
			return true
		case <-t.pauses.signal():
			timer.Stop()
			if e, ok := t.pauses.get(r.key); ok && e.voids(r, due, t.hostNow()) {
				return true // void: Wait books again
			}
		}
	}
}

// Pause stops every worker from starting a call on key for d. A longer
// pause already set is kept. When it ends, calls resume at the key's
// pace, one interval apart. The pause is announced to this process's
// waiters at once, and to other processes' through Redis pub/sub when
// they subscribe. To answer a refusal from the downstream, use Backoff.
func (t *Throttle) Pause(ctx context.Context, key string, lim Limit, d time.Duration) (time.Duration, error) {
	return t.pause(ctx, key, lim, d, false)
}

// Backoff is the fleet's answer to a refusal (a 429 or 503 with
// Retry-After) or to a downstream that says its budget is nearly spent:
// it pauses key for d, as Pause does, and steps the key's shared rate
// down, so that the fleet stops provoking refusals. The share of lim's
// rate the fleet paces at drops to 95% of what it was, and the ceiling
// it climbs back to (2% of the rate a second) to 98%; the ceiling itself
// creeps back to the whole rate at 1% a minute. Refusals within d of a
// step (the other calls in flight when the first came back) do not step
// again. A fleet told the API's documented quota thus settles just under
// what the API really allows (docs/throttle.md, Adaptive pacing).
func (t *Throttle) Backoff(ctx context.Context, key string, lim Limit, d time.Duration) (time.Duration, error) {
	return t.pause(ctx, key, lim, d, true)
}

// shareFull is the whole rate in the scripts' basis points.
const shareFull = 10000

func (t *Throttle) pause(ctx context.Context, key string, lim Limit, d time.Duration, slow bool) (time.Duration, error) {
	c, err := lim.compile()
	if err != nil {
		return 0, err
	}
	k, err := t.rateKey(key)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, nil
	}
	us := int64((d + time.Microsecond - 1) / time.Microsecond)
	flag := "0"
	if slow {
		flag = "1"
	}
	args := []any{c.args[0], c.args[1], c.args[2], us, t.now(), flag}
	for _, b := range c.also {
		args = append(args, b.args[0], b.args[1], b.args[2])
	}
	v, err := scripts.ThrottlePause.Run(ctx, t.client, []string{k}, args...).Int64Slice()
	if err != nil {
		if unreachable(err) {
			// Nobody can take a slot from Redis now anyway; pause what
			// this process controls.
			now := t.hostNow()
			t.local.pause(key, c, now.Add(d))
			t.pauses.set(key, pauseEnd{guess: now.Add(d), expires: now.Add(d)}, now)
			return d, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return 0, fmt.Errorf("sluice: throttle pause: %w", err)
	}
	if len(v) != 4 {
		return 0, fmt.Errorf("sluice: throttle pause: unexpected reply of %d values", len(v))
	}
	if v[3] == 1 {
		t.metrics.slowed(c.name)
	}
	t.metrics.paced(c, float64(v[2])/shareFull)
	// The end is kept on the scripts' clock, to compare with the slots
	// decided there; the host's clock only says when to forget it.
	remaining, end := time.Duration(v[0])*time.Microsecond, v[1]
	now := t.hostNow()
	t.pauses.set(key, pauseEnd{at: end, expires: now.Add(remaining)}, now)
	t.metrics.paused(c.name)
	t.publish(ctx, key, remaining, end)
	return remaining, nil
}

// String describes the reservation for logs.
func (r Reservation) String() string {
	if !r.OK {
		return fmt.Sprintf("no slot within the allowed wait; retry after %v", r.RetryAfter)
	}
	return fmt.Sprintf("slot in %v", r.Delay)
}

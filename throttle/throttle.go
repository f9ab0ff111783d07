// Package throttle paces outbound calls across a whole fleet of workers.
//
// A Throttle shares one GCRA bucket per key in Redis (the leaky bucket as a
// queue). Allow takes a slot only if it is due now, Reserve books the next
// one and says how long to wait, Wait books and sleeps, as in
// golang.org/x/time/rate. Settle corrects a booking to the call's real
// cost once the call reports it. Pause and Backoff stop the fleet calling a key for
// a while; Acquire leases one of a fixed number of concurrency slots. Every
// decision is one Lua script on the Redis server's clock. Without Redis a
// Throttle fails closed unless Options.Fallback is set. docs/throttle.md
// has the details and the measured figures.
package throttle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/clockhook"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/ratio"
	"github.com/sluicehq/sluice/internal/scripts"
)

// Defaults.
const (
	// DefaultPrefix starts every key a Throttle writes.
	DefaultPrefix = "sluice:th"
	// DefaultMaxWait is the longest a reserved slot may be away when
	// Limit.MaxWait is zero (unset).
	DefaultMaxWait = 10 * time.Second
	// NoWait, as Limit.MaxWait, takes only a slot that is due now: a call
	// that would have to wait is not given one. Any negative MaxWait
	// means the same; the policy file spells it max_wait: none.
	NoWait time.Duration = -1
	// DefaultGuard is Limit.Guard when it is zero: enough for the tens
	// to a hundred or so milliseconds by which a burst's calls, sent in a
	// rush (a fleet starting on a backlog), reach the API later than the
	// paced calls after them. It delays only the first paced call after
	// a burst; the pace is unchanged.
	DefaultGuard = 250 * time.Millisecond
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
	// Burst is how many units may start at once after an idle spell: an
	// API's documented bucket size (Shopify's 40). The default, 1, spaces
	// every call evenly; larger values behave as a token bucket of that
	// size.
	Burst int64
	// Guard is the margin a bucket of Burst > 1 leaves the API at its
	// edge: a call that must wait for room starts Guard later than the
	// bucket alone would allow, and so does every call from the booking
	// that leaves the bucket within Guard of full until the bucket has
	// been empty for Guard. A burst whose calls reached the API a little
	// late then cannot make the paced calls after it overflow the API's
	// bucket. The pace is unchanged, and so is the burst after an idle
	// spell while the guard is at most half an interval; a larger one
	// starts the burst's units within it of full that much later. At
	// most half the bucket (Burst/2 units' intervals) is used. Default
	// DefaultGuard; negative means none. It applies to the buckets of
	// Also as well.
	Guard time.Duration
	// MaxWait is the furthest a slot may be: a call whose slot would be
	// later is not given one. Zero (unset) means DefaultMaxWait, 10s;
	// NoWait (or any negative value) means only a slot that is due now.
	MaxWait time.Duration
	// Learn books each call at its estimate times the ratio of the real
	// to the estimated cost of the key's calls settled lately (Settle),
	// instead of at the estimate: in the Limit's own bucket and in each
	// of Also's that counts cost, rounded, at least 1 and at most the
	// bucket's burst. The calls in flight, whose real cost is not known
	// yet, then book what such calls have turned out to cost, so that the
	// debt their settles bring stays small (docs/throttle.md, Reserve,
	// then settle). Until a call of the key has been settled, and for a
	// reservation of the local fallback, the estimate stands. Such a
	// bucket opens its burst as it learns: before the first settle calls
	// start one after another at the rate, and the burst grows to Burst
	// as settles replace the ratio's starting guess (half of it after
	// about 8 settles, nearly nine tenths after 32), so that a burst of calls whose real cost nobody
	// knows yet cannot overrun the API. The policy file sets it for a
	// downstream with cost_from.
	Learn bool
	// Also lists at most MaxAlso further rates the key must keep to, for
	// APIs that state several limits (10 a second and 1,000 an hour). A
	// call takes a slot in every bucket at once. The local fallback paces
	// only the Limit's own rate.
	Also []Rate
}

// WaitLimit is how long a call may wait under l, for its slot or for a
// concurrency lease: MaxWait, DefaultMaxWait when it is zero, and no wait
// at all when it is negative (NoWait).
func (l Limit) WaitLimit() time.Duration {
	if l.MaxWait == 0 {
		return DefaultMaxWait
	}
	return max(l.MaxWait, 0)
}

// MaxAlso is the most rates Limit.Also may list.
const MaxAlso = 4

// Rate is one further limit of a key (Limit.Also), with the defaults and
// validation of the Limit's own.
type Rate struct {
	// Rate units are allowed per Per. Required.
	Rate int64
	// Per is the period of Rate; default one second.
	Per time.Duration
	// Burst is how many units may start at once after an idle spell;
	// default 1. An hourly quota usually wants a burst: with 1,000 an
	// hour and Burst 1, calls are 3.6 s apart.
	Burst int64
	// Counts says what a call takes from this bucket.
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

// String describes the rate, as "20 per 10s, burst 5, counting calls".
func (r Rate) String() string {
	s := fmt.Sprintf("%d per %v", r.Rate, cmp.Or(r.Per, time.Second))
	if r.Burst > 1 {
		s += fmt.Sprintf(", burst %d", r.Burst)
	}
	if r.Counts == CountsCalls {
		s += ", counting calls"
	}
	return s
}

// bucket is one validated Rate in the units of the scripts.
type bucket struct {
	rate   Rate  // as given, with Per and Burst filled in
	rl, pr int64 // the rate in lowest terms: rl units per pr µs
	burst  int64
}

// cost is what a call of cost n takes from b.
func (b bucket) cost(n int64) int64 {
	if b.rate.Counts == CountsCalls {
		return 1
	}
	return n
}

func (r Rate) compile() (bucket, error) {
	r.Per, r.Burst = cmp.Or(r.Per, time.Second), cmp.Or(r.Burst, 1)
	if r.Counts != CountsCost && r.Counts != CountsCalls {
		return bucket{}, fmt.Errorf("%w: unknown Counts %d", algorithms.ErrInvalidPolicy, int(r.Counts))
	}
	p := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: r.Rate, Period: r.Per, Burst: r.Burst}
	if err := p.Validate(); err != nil {
		return bucket{}, err
	}
	b := bucket{rate: r, burst: r.Burst}
	b.rl, b.pr = ratio.Reduce(r.Rate, int64(r.Per/time.Microsecond))
	return b, nil
}

// compiled is a validated Limit: its own bucket, and those of Also.
type compiled struct {
	bucket
	name    string
	maxWait int64 // µs
	guard   int64 // µs, before the cap of half the bucket
	learn   bool
	also    []bucket
}

func (l Limit) compile() (compiled, error) {
	own, err := Rate{Rate: l.Rate, Per: l.Per, Burst: l.Burst}.compile()
	if err != nil {
		return compiled{}, err
	}
	if len(l.Also) > MaxAlso {
		return compiled{}, fmt.Errorf("%w: Also lists %d rates; at most %d", algorithms.ErrInvalidPolicy, len(l.Also), MaxAlso)
	}
	c := compiled{bucket: own, name: cmp.Or(l.Name, "default"), maxWait: int64(l.WaitLimit() / time.Microsecond),
		guard: int64(max(cmp.Or(l.Guard, DefaultGuard), 0) / time.Microsecond), learn: l.Learn}
	for i, r := range l.Also {
		b, err := r.compile()
		if err != nil {
			return compiled{}, fmt.Errorf("Also[%d]: %w", i, err)
		}
		c.also = append(c.also, b)
	}
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
	// Fallback, between 0 and 1, is the share of each key's own rate (not
	// of Limit.Also) that a process paces by itself while Redis is
	// unreachable. Zero (the default) fails closed: no slot without Redis.
	// With N processes a share of at most 1/N keeps the fleet inside the
	// quota.
	Fallback float64
	// Metrics receives the throttle's counters; nil for none.
	Metrics *Metrics
	// Logger receives warnings; default slog.Default().
	Logger *slog.Logger
	// Subscribe, when true, listens through Redis pub/sub for pauses and
	// lease releases by other processes, and wakes this process's waiters
	// at once. Default off in the library; cmd/worker turns it on.
	Subscribe bool

	// clock, when set, replaces the Redis server's clock in the scripts;
	// waits still sleep in real time. Set by this package's tests, and by
	// the module's others through internal/clockhook.
	clock func() time.Time
}

func init() {
	clockhook.Register(func(o *Options, now func() time.Time) { o.clock = now })
}

// Throttle paces calls per key across every process that shares its
// Redis. Safe for concurrent use; create one per process and Close it.
type Throttle struct {
	client     redis.UniversalClient
	prefix     string
	metrics    *Metrics
	log        *slog.Logger
	clock      func() time.Time
	local      *localBuckets // nil: fail closed
	pauses     *pauseBoard
	releases   *releaseLine
	leasePoll  time.Duration    // how often WaitAcquire asks again, as a safety net when it hears releases
	subscribed bool             // Options.Subscribe: this process hears its own announcements too
	hostNow    func() time.Time // the host's clock: only for local deadlines
	stop       func()
	wg         sync.WaitGroup
}

// New returns a Throttle on client (a *redis.Client, *redis.ClusterClient
// or any redis.UniversalClient).
func New(client redis.UniversalClient, opts *Options) (*Throttle, error) {
	if client == nil {
		return nil, errors.New("sluice: throttle.New: nil client")
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.Fallback < 0 || opts.Fallback > 1 {
		return nil, fmt.Errorf("sluice: throttle: Fallback must be between 0 and 1, got %v", opts.Fallback)
	}
	t := &Throttle{
		client: client, prefix: cmp.Or(opts.Prefix, DefaultPrefix), metrics: opts.Metrics,
		log: cmp.Or(opts.Logger, slog.Default()), clock: opts.clock,
		pauses:    &pauseBoard{ends: make(map[string]pauseEnd), notify: make(chan struct{})},
		releases:  &releaseLine{waiting: make(map[string][]chan struct{})},
		leasePoll: 100 * time.Millisecond, hostNow: time.Now, stop: func() {},
	}
	if t.metrics == nil {
		t.metrics, _ = NewMetrics(nil) // recorded, never exported
	}
	if opts.Fallback > 0 {
		t.local = &localBuckets{share: opts.Fallback, tats: make(map[string]localTAT)}
	}
	if opts.Subscribe {
		t.leasePoll, t.subscribed = time.Second, true
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

// key names the Redis key of the given kind for a caller's key.
func (t *Throttle) key(kind, key string) (string, error) {
	if key == "" {
		return "", algorithms.ErrInvalidKey
	}
	return keyspace.Key(t.prefix, kind, key)
}

func (t *Throttle) rateKey(key string) (string, error) { return t.key("rate", key) }

// learnKey names the hash of key's learned estimate (Settle), in the
// same hash slot as its bucket.
func (t *Throttle) learnKey(key string) (string, error) { return t.key("est", key) }

func (t *Throttle) now() string {
	if t.clock == nil {
		return ""
	}
	return strconv.FormatInt(t.clock().UnixMicro(), 10)
}

// callErr wraps the error of a call to Redis made by op: ErrUnavailable
// when Redis could not be asked, else op's name.
func callErr(op string, err error) error {
	if unreachable(err) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return fmt.Errorf("sluice: throttle %s: %w", op, err)
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
	// Delay is how long from the reservation until the slot.
	Delay time.Duration
	// RetryAfter, when !OK, is how long until a slot within MaxWait may be
	// had, if nobody else books one first.
	RetryAfter time.Duration
	// Paused is how much longer the key was paused when reserved.
	Paused time.Duration
	// Local reports that the in-process fallback booked the slot.
	Local bool
	// Share is the part of the Limit's rate the fleet paced this slot at,
	// from 0 to 1: below 1 after Backoff, climbing back to 1 over time.
	Share float64

	key       string
	n         int64
	tats      []tat // each bucket's, the Limit's own and then Also's, to cancel r
	queued    bool  // booked on Redis: tats are set
	localBook bool  // booked by the local fallback
	booked    time.Time
	compile   compiled
	slot      int64 // the slot, in µs on the scripts' clock
	settled   int64 // under a Limit that learns: the net units settles had moved the key's own bucket by when r booked
}

// tat is a bucket's TAT after a reservation, a + f/rl µs, the interval's
// numerator pr it was paced at, and the count n it booked (the call's
// estimate times the key's learned ratio, in a bucket that counts cost).
type tat struct{ a, f, pr, n int64 }

// before reports whether r's slot, as the reserve script decided it,
// comes before end, in µs on the scripts' clock; r must be queued.
func (r Reservation) before(end int64) bool { return r.slot < end }

// voids reports whether the pause e voids r, whose slot is at due on the
// host's clock. A slot booked on Redis is void if it comes before the
// pause's end on the scripts' clock; a pause known only on the host's clock
// voids a slot if it ends after the slot and after now.
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
	lim.MaxWait = NoWait
	return t.reserve(ctx, key, lim, n, true)
}

func (t *Throttle) reserve(ctx context.Context, key string, lim Limit, n int64, book bool) (Reservation, error) {
	c, err := lim.compile()
	if err != nil {
		return Reservation{}, err
	}
	if n < 1 {
		return Reservation{}, fmt.Errorf("%w: cost %d", algorithms.ErrInvalidCost, n)
	}
	if n > c.burst {
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
	lk, err := t.learnKey(key)
	if err != nil {
		return Reservation{}, err
	}
	v, err := scripts.ThrottleReserve.Run(ctx, t.client, []string{k, lk}, c.reserveArgs(n, book, t.now())...).Int64Slice()
	// The delay counts from the server's clock when the script ran; the
	// reply arrives later, so counting from its arrival never runs early.
	booked := t.hostNow()
	if err != nil {
		if unreachable(err) && t.local != nil {
			pause, _ := t.pauses.get(key)
			r := t.local.reserve(key, c, n, book, booked, pause.expires)
			if book {
				t.metrics.reservations.WithLabelValues(c.name, r.result()).Inc()
			}
			return r, nil
		}
		t.metrics.reservations.WithLabelValues(c.name, "error").Inc()
		return Reservation{}, callErr("reserve", err)
	}
	want := 12 + 4*len(c.also) // the Limit's own bucket, the slot, the count and u; 4 values a further bucket
	if len(v) != want {
		return Reservation{}, fmt.Errorf("sluice: throttle reserve: unexpected reply of %d values", len(v))
	}
	r := Reservation{
		OK:     v[0] == 1,
		Delay:  time.Duration(v[1]) * time.Microsecond,
		Paused: time.Duration(v[3]) * time.Microsecond,
		Share:  float64(v[7]) / shareFull,
		key:    key, n: n, tats: []tat{{a: v[4], f: v[5], pr: v[6], n: v[10]}}, booked: booked, compile: c,
		queued: book && v[0] == 1, slot: v[9], settled: v[11],
	}
	for i := 12; i < len(v); i += 4 {
		r.tats = append(r.tats, tat{a: v[i], f: v[i+1], pr: v[i+2], n: v[i+3]})
	}
	if !r.OK {
		r.Delay = 0
		r.RetryAfter = time.Duration(v[2]) * time.Microsecond
	}
	if book {
		t.metrics.reservations.WithLabelValues(c.name, r.result()).Inc()
		t.metrics.rate.WithLabelValues(c.name).Set(c.perSecond(r.Share))
	}
	return r, nil
}

// reserveArgs are the reserve script's arguments for a call of cost n.
// go-redis sends an int64 in decimal and a bool as 1 or 0, as the scripts
// read them.
func (c compiled) reserveArgs(n int64, book bool, now string) []any {
	args := []any{c.rl, c.pr, c.burst, n, c.maxWait, book, now, c.guard, c.learn}
	for _, b := range c.also {
		args = append(args, b.rl, b.pr, b.burst, b.cost(n), c.learn && b.rate.Counts == CountsCost)
	}
	return args
}

// Cancel gives back a reservation that will not be used, and reports
// whether the slot came back: only while no later reservation has been
// made on the key, and never into a pause (docs/throttle.md, The verbs).
func (t *Throttle) Cancel(ctx context.Context, r Reservation) (bool, error) {
	if !r.OK || r.Local || r.key == "" {
		return false, nil
	}
	k, err := t.rateKey(r.key)
	if err != nil {
		return false, err
	}
	var args []any
	for i, b := range append([]bucket{r.compile.bucket}, r.compile.also...) {
		x := r.tats[i]
		args = append(args, b.rl, x.pr, x.n, x.a, x.f, b.burst)
	}
	ok, err := scripts.ThrottleCancel.Run(ctx, t.client, []string{k}, args...).Int()
	if err != nil {
		return false, callErr("cancel", err)
	}
	return ok == 1, nil
}

// Wait books the next slot for n units of key and sleeps until it. If the
// slot is further away than lim.MaxWait it returns a *TooFarError at once.
// If ctx ends first, the reservation is cancelled (when it can be) and
// ctx's error returned. A pause announced while it sleeps voids a slot that
// comes before the pause's end; Wait then books again.
func (t *Throttle) Wait(ctx context.Context, key string, lim Limit, n int64) (Reservation, error) {
	for {
		r, err := t.Reserve(ctx, key, lim, n)
		if err != nil {
			return r, err
		}
		if !r.OK {
			return r, &TooFarError{Key: key, RetryAfter: r.RetryAfter, Paused: r.Paused}
		}
		if ok, err := t.Await(ctx, r); ok || err != nil {
			return r, err
		}
	}
}

// Await sleeps until r's slot, for callers that Reserve, do some work
// while the slot approaches, and then wait for it. Under a Limit that
// learns, a slot booked ahead moves later, when it comes, by what
// settles have added to the key's bucket since it was booked (Settle). It reports false if the
// slot must not be used (a pause announced in the meantime ends after it,
// or the caller woke too late): reserve again. If ctx ends first it
// cancels r (when it can) and returns ctx's error.
func (t *Throttle) Await(ctx context.Context, r Reservation) (bool, error) {
	due := r.booked.Add(r.Delay)
	// A slot booked ahead under a Limit that learns is checked once when
	// it comes: it moves later by the debt settled since (settledSince).
	recheck := r.queued && r.Delay > 0 && r.compile.learn
	for {
		e, announced := t.pauses.get(r.key)
		if e.voids(r, due, t.hostNow()) {
			return false, nil
		}
		d := due.Sub(t.hostNow())
		if d <= 0 && recheck {
			recheck = false
			if d = t.settledSince(ctx, r); d > 0 {
				due = due.Add(d)
				continue
			}
		}
		if d <= 0 {
			break
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			if _, err := t.Cancel(context.WithoutCancel(ctx), r); err != nil {
				t.log.Warn("sluice: cancelling an unused slot failed", "err", err)
			}
			return false, ctx.Err()
		case <-timer.C:
		case <-announced:
			timer.Stop()
		}
	}
	if r.queued && r.Delay > 0 && t.hostNow().Sub(due) > r.maxLate() {
		// Too late to use the slot without bunching with the calls on
		// time after it: leave it as a gap (docs/throttle.md, Late slots).
		t.metrics.reservations.WithLabelValues(r.compile.name, "late").Inc()
		return false, nil
	}
	t.metrics.wait.WithLabelValues(r.compile.name).Observe(t.hostNow().Sub(r.booked).Seconds())
	return true, nil
}

// maxLate is how late a slot may still be used: half of Burst paced
// intervals, and at least 5 ms.
func (r Reservation) maxLate() time.Duration {
	c := r.compile
	return max(time.Duration(c.burst*r.tats[0].pr/c.rl)*time.Microsecond/2, 5*time.Millisecond)
}

// Pause stops every worker from starting a call on key for d. A longer
// pause already set is kept. When it ends, calls resume at the key's
// pace, one interval apart. Waiters in this process hear of it at once,
// in others through Redis pub/sub when they subscribe. To answer a
// refusal from the downstream, use Backoff.
func (t *Throttle) Pause(ctx context.Context, key string, lim Limit, d time.Duration) (time.Duration, error) {
	return t.pause(ctx, key, lim, d, false)
}

// Backoff answers a refusal (a 429 or 503 with Retry-After) or a
// downstream that says its budget is nearly spent: it pauses key for d, as
// Pause does, and steps the fleet's share of lim's rate down to 95% of
// what it was, and the ceiling it climbs back to to 98%, never below
// MinShare. Refusals within d of a step do not step again.
// docs/throttle.md (Adaptive pacing) has the whole rule.
func (t *Throttle) Backoff(ctx context.Context, key string, lim Limit, d time.Duration) (time.Duration, error) {
	return t.pause(ctx, key, lim, d, true)
}

// shareFull is the whole rate in the scripts' basis points.
const shareFull = 10000

// MinShare is the least share of a Limit's rate that refusals step the
// fleet's pace down to (Backoff): three quarters. Adaptive pacing finds
// the few percent of margin that the jitter of real machines needs; a
// caller whose every call is refused (a path that always answers 429)
// steps the pace down at each refusal however well the rest goes, and
// the floor bounds what it costs the calls that succeed. A pace that
// stays at the floor while refusals go on says the Limit's rate is above
// what the API allows: lower it. The scripts hold the same figure
// (prelude.lua, SHARE_MIN).
const MinShare = 0.75

func (t *Throttle) pause(ctx context.Context, key string, lim Limit, d time.Duration, slow bool) (time.Duration, error) {
	c, err := lim.compile()
	if err != nil {
		return 0, err
	}
	k, err := t.rateKey(key)
	if err != nil || d <= 0 {
		return 0, err
	}
	us := int64((d + time.Microsecond - 1) / time.Microsecond)
	args := []any{c.rl, c.pr, c.burst, us, t.now(), slow}
	for _, b := range c.also {
		args = append(args, b.rl, b.pr, b.burst)
	}
	v, err := scripts.ThrottlePause.Run(ctx, t.client, []string{k}, args...).Int64Slice()
	if err != nil {
		if unreachable(err) {
			// Nobody can take a slot from Redis now anyway; pause what
			// this process controls.
			now := t.hostNow()
			t.pauses.set(key, pauseEnd{guess: now.Add(d), expires: now.Add(d)}, now)
			return d, callErr("pause", err)
		}
		return 0, callErr("pause", err)
	}
	if len(v) != 4 {
		return 0, fmt.Errorf("sluice: throttle pause: unexpected reply of %d values", len(v))
	}
	if v[3] == 1 {
		t.metrics.slowdowns.WithLabelValues(c.name).Inc()
	}
	t.metrics.rate.WithLabelValues(c.name).Set(c.perSecond(float64(v[2]) / shareFull))
	// The end is kept on the scripts' clock, to compare with the slots
	// decided there; the host's clock only says when to forget it.
	remaining, end := time.Duration(v[0])*time.Microsecond, v[1]
	now := t.hostNow()
	t.pauses.set(key, pauseEnd{at: end, expires: now.Add(remaining)}, now)
	t.metrics.pauses.WithLabelValues(c.name).Inc()
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

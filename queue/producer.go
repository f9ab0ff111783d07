package queue

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/internal/scripts"
)

// TenantPolicy is how one tenant is admitted and drained.
type TenantPolicy struct {
	// Admission is the tenant's admission policy; nil admits everything.
	Admission *algorithms.Policy
	// Weight is the tenant's share of the fair drain: a tenant of weight
	// 3 has up to 3 jobs handed over per turn. Default 1; at most 100.
	Weight int
	// Class labels the tenant's metrics (backlog, wait, throttled time);
	// tenants are never labels. Default "default".
	Class string
}

// Config configures a Producer, and the waiting room a Server drains.
type Config struct {
	// Queue is the asynq queue's name; default "default".
	Queue string
	// Prefix starts the waiting room's keys; default DefaultPrefix.
	Prefix string
	// Bound is the most jobs the queue holds that no worker has taken
	// yet (Stats.Depth). Required, at least 1.
	Bound int64
	// TenantBound is the most jobs one tenant may have in the waiting
	// room, not yet handed to asynq (TenantDepth); 0 for no bound.
	TenantBound int64
	// Shards is how many shards the waiting room spreads over, each
	// under its own hash tag with its own asynq queue ("<Queue>:<n>"), so
	// that on Redis Cluster a queue's work spreads over the masters.
	// Default 1 (one tag, the queue's name, as asynq's). A tenant lives
	// in one shard, chosen by a hash of its id; each shard holds its
	// share of Bound exactly (docs/queue.md, Shards). At most MaxShards.
	// Fixed when the queue is first used: a different count is refused
	// with ErrShardsChanged.
	Shards int
	// MaxPayload is the largest payload accepted; default
	// DefaultMaxPayload.
	MaxPayload int
	// Tenants returns a tenant's policy; nil admits every tenant with
	// weight 1.
	Tenants func(tenant string) TenantPolicy
	// Check, when set, is asked about each job before it is admitted: an
	// error refuses the job (wrapped in ErrInvalidJob), for what the
	// workers could never run. The policy file's Config.CheckJob is one.
	Check func(job *Job) error
	// MemoryHeadroom is the share of Redis's maxmemory that Enqueue
	// leaves free for the workers, and at least 2 MiB (half of a smaller
	// maxmemory), what worker processes starting on a full Redis write
	// before their first jobs are done: with used_memory above the rest,
	// Enqueue refuses with a *RedisFullError before Redis refuses
	// anything, so that the workers' writes (asynq's dequeue among them,
	// which Redis refuses once it is full) still run and the queue can
	// drain. Enqueue reads INFO memory about once a second (every master
	// of a cluster; the fullest counts), not per job. 0 means
	// DefaultMemoryHeadroom; negative turns the check off (Redis's own
	// refusal is still a *RedisFullError). A Redis without maxmemory is
	// not checked.
	MemoryHeadroom float64
	// AllowEviction lets Enqueue write to a Redis whose maxmemory-policy
	// may evict keys (anything but noeviction, with a maxmemory). An
	// evicted key is a lost job, a drifting counter or a broken quota:
	// without it Enqueue refuses with a *RedisEvictsError.
	AllowEviction bool

	// clock, when set, replaces the Redis server's clock in the scripts.
	// Only this package's tests set it.
	clock func() time.Time
}

func (c *Config) fill() error {
	c.Queue = cmp.Or(c.Queue, "default")
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.MaxPayload = cmp.Or(c.MaxPayload, DefaultMaxPayload)
	if !names.Valid(c.Queue, names.MaxLen, "") {
		return fmt.Errorf("sluice: queue name %.64q: use at most 64 bytes of letters, digits and _.-", c.Queue)
	}
	if c.Bound < 1 {
		return fmt.Errorf("sluice: queue %q: Bound must be at least 1, got %d", c.Queue, c.Bound)
	}
	if c.TenantBound < 0 {
		return fmt.Errorf("sluice: queue %q: TenantBound must not be negative, got %d", c.Queue, c.TenantBound)
	}
	c.Shards = cmp.Or(c.Shards, 1)
	if c.Shards < 1 || c.Shards > MaxShards {
		return fmt.Errorf("sluice: queue %q: Shards must be 1 to %d, got %d", c.Queue, MaxShards, c.Shards)
	}
	if c.Bound < int64(c.Shards) {
		return fmt.Errorf("sluice: queue %q: Bound %d is below its %d shards' one job each", c.Queue, c.Bound, c.Shards)
	}
	if c.MemoryHeadroom == 0 {
		c.MemoryHeadroom = DefaultMemoryHeadroom
	}
	if c.MemoryHeadroom >= 1 {
		return fmt.Errorf("sluice: queue %q: MemoryHeadroom must be below 1, got %v", c.Queue, c.MemoryHeadroom)
	}
	if c.MaxPayload < 0 {
		return fmt.Errorf("sluice: queue %q: MaxPayload must not be negative, got %d", c.Queue, c.MaxPayload)
	}
	if c.Tenants == nil {
		c.Tenants = func(string) TenantPolicy { return TenantPolicy{} }
	}
	return nil
}

func (c *Config) now() string {
	if c.clock == nil {
		return ""
	}
	return strconv.FormatInt(c.clock().UnixMicro(), 10)
}

// Producer admits jobs and adds them to the waiting room. Safe for
// concurrent use.
type Producer struct {
	client redis.UniversalClient
	cfg    Config
	shards shards
	mem    memoryGate
}

// NewProducer returns a Producer on client for *opts (nil: the defaults).
// It does not connect: the first Enqueue (or CheckRedis) reads Redis's
// memory settings and refuses an evicting Redis (Config.AllowEviction).
func NewProducer(client redis.UniversalClient, opts *Config) (*Producer, error) {
	if client == nil {
		return nil, errors.New("sluice: queue.NewProducer: nil client")
	}
	var cfg Config
	if opts != nil {
		cfg = *opts
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Producer{client: client, cfg: cfg, shards: newShards(cfg.Prefix, cfg.Queue, cfg.Shards)}, nil
}

// Receipt describes an accepted job.
type Receipt struct {
	// ID is the job's id (chosen by the queue when the job had none).
	ID string
	// Depth is the queue's depth after the job was added.
	Depth int64
	// Decision is the tenant's admission decision; zero when the tenant
	// has no admission policy.
	Decision algorithms.Decision
	// Policy is the tenant's admission policy, if any.
	Policy *algorithms.Policy
}

// randomHex returns n random bytes in hex. Ids and nonces need to be
// unique, not secret: math/rand/v2 (ChaCha8, seeded per process) will do.
func randomHex(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return hex.EncodeToString(b)
}

// Check runs the checks that Enqueue runs before it touches Redis: the
// job's own fields and Config.Check. A job it refuses, Enqueue refuses; a
// job it passes may still be refused by admission, the bound or a
// duplicate id. Its error wraps ErrInvalidJob.
func (p *Producer) Check(job Job) error {
	if err := job.validate(p.cfg.MaxPayload); err != nil {
		return err
	}
	if p.cfg.Check == nil {
		return nil
	}
	err := p.cfg.Check(&job)
	if err != nil && !errors.Is(err, ErrInvalidJob) {
		err = fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return err
}

// Enqueue admits job by its tenant's policy and adds it to the waiting
// room. It returns a *DuplicateJobError when a job of the tenant with the
// same ID is in the queue (see Job.ID), a *RateLimitedError when admission refuses, a
// *QueueFullError when the queue or the tenant's backlog is at its bound,
// a *RedisFullError when Redis is out of memory (Config.MemoryHeadroom),
// a *RedisEvictsError when Redis may evict keys (Config.AllowEviction),
// and an error wrapping ErrInvalidJob for a job that could never be
// accepted; in each case nothing was written. Once Enqueue returns nil the
// job is stored in Redis and will run (at least once).
func (p *Producer) Enqueue(ctx context.Context, job Job) (Receipt, error) {
	return p.enqueue(ctx, job, "", time.Time{})
}

// ErrTickTaken is returned by EnqueueTick when the tick was claimed
// already, by this or another producer.
var ErrTickTaken = errors.New("sluice: schedule's tick taken")

// EnqueueTick enqueues job as the tick of the periodic schedule named
// schedule, once across every producer of the queue: the tick is claimed
// in the same atomic step that admits and adds the job, and a tick that
// is not later than the schedule's last claimed tick is refused with
// ErrTickTaken, writing nothing. The claim is recorded in a hash under
// the hash tag of the job's tenant's shard (docs/queue.md, Periodic
// jobs), so schedule names must be unique within a queue. Once claimed,
// the tick is spent whatever becomes of the job: a job refused by
// admission, the bound or a duplicate id (the errors Enqueue returns)
// leaves the tick claimed, and it is not tried again. A job that Check
// refuses, or a Redis that is out of memory or cannot be reached, claims
// nothing. schedule is 1 to 64 bytes of letters, digits and _.-.
func (p *Producer) EnqueueTick(ctx context.Context, schedule string, tick time.Time, job Job) (Receipt, error) {
	if !names.Valid(schedule, names.MaxLen, "") {
		return Receipt{}, invalid("schedule name %.64q: use 1 to %d bytes of letters, digits and _.-", schedule, names.MaxLen)
	}
	if tick.IsZero() || tick.UnixMicro() < 0 {
		return Receipt{}, invalid("schedule %q: tick %v is not a time after 1970", schedule, tick)
	}
	return p.enqueue(ctx, job, schedule, tick)
}

func (p *Producer) enqueue(ctx context.Context, job Job, schedule string, tick time.Time) (Receipt, error) {
	if err := p.Check(job); err != nil {
		return Receipt{}, err
	}
	// An id the producer chooses is random and no other job's: the
	// enqueue script does not record it for the duplicate check. Other
	// tenants' ids never block one.
	recordID := ""
	if job.ID == "" {
		job.ID = randomHex(16)
	} else {
		recordID = job.ScopedID()
	}
	job.idRecorded = recordID != ""
	job.nonce = randomHex(8)
	job.enqueuedAt = time.Now().UTC()
	if p.cfg.clock != nil {
		job.enqueuedAt = p.cfg.clock().UTC()
	}
	job.retried, job.moves = 0, 0
	tp := p.cfg.Tenants(job.Tenant)
	job.class = cmp.Or(tp.Class, defaultClass)
	weight := min(max(tp.Weight, 1), 100)
	k, enc, list, _ := p.shards.tenant(job.Tenant) // validate refused an empty tenant, Encode's only error
	item, err := job.item()
	if err != nil {
		return Receipt{}, invalid("%v", err)
	}
	if err := p.roomFor(ctx, len(item)); err != nil {
		return Receipt{}, err
	}
	alg, capacity := "", int64(0)
	var adm [5]string // "": no policy
	if tp.Admission != nil {
		pol := *tp.Admission
		if adm, err = pol.ScriptArgs(); err != nil {
			return Receipt{}, fmt.Errorf("sluice: tenant %.64q: %w", job.Tenant, err)
		}
		if job.cost() > pol.Capacity() {
			return Receipt{}, invalid("cost %d exceeds the capacity %d of tenant %.64q's policy (%s): %v",
				job.cost(), pol.Capacity(), job.Tenant, pol, algorithms.ErrCostExceedsCapacity)
		}
		alg, capacity = string(pol.Algorithm), pol.Capacity()
	}
	bound := p.shards.bound(p.cfg.Bound, p.shards.index(k.queue))
	// KEYS and ARGV as queue_enqueue.lua lists them; "" for a default.
	admKey := k.admission(cmp.Or(alg, "none"), enc)
	due := int64(0)
	if !job.RunAt.IsZero() {
		due = max(job.RunAt.UnixMicro(), 1)
	}
	v, err := scripts.QueueEnqueue(alg).Run(ctx, p.client,
		[]string{k.meta, k.ring, k.members, list, k.asynqPending, admKey, k.weights, k.cdepth, k.ids, k.later, k.ldepth, k.ticks, k.held},
		enc, item, bound, job.cost(), adm[0], adm[1], adm[2], adm[3], adm[4],
		p.cfg.TenantBound, weight, job.class, recordID, p.cfg.now(), due, schedule, tickMicros(schedule, tick)).Slice()
	if isOOM(err) {
		return Receipt{}, &RedisFullError{Queue: p.cfg.Queue, Err: err}
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("sluice: enqueue to %q: %w", p.cfg.Queue, err)
	}
	if len(v) != 4 {
		return Receipt{}, fmt.Errorf("sluice: enqueue to %q: unexpected reply of %d values", p.cfg.Queue, len(v))
	}
	var n [4]int64 // the reply's numbers
	for i := 1; i < 4; i++ {
		n[i], _ = v[i].(int64)
	}
	status, _ := v[0].(string)
	switch status {
	case enqueueQueued:
		r := Receipt{ID: job.ID, Depth: n[1], Policy: tp.Admission}
		if tp.Admission != nil {
			r.Decision = algorithms.Decision{Allowed: true, Limit: capacity, Remaining: n[2], ResetAfter: time.Duration(n[3]) * time.Microsecond}
		}
		return r, nil
	case enqueueFull:
		e := &QueueFullError{Queue: p.cfg.Queue, Depth: n[1], Bound: n[2]}
		if len(p.shards) > 1 {
			e.Shard = k.queue
		}
		return Receipt{}, e
	case enqueueTenantFull:
		return Receipt{}, &QueueFullError{Queue: p.cfg.Queue, Tenant: job.Tenant, Depth: n[1], Bound: n[2]}
	case enqueueDuplicate:
		return Receipt{}, &DuplicateJobError{Queue: p.cfg.Queue, Tenant: job.Tenant, ID: job.ID}
	case enqueueTickTaken:
		return Receipt{}, fmt.Errorf("%w: schedule %q, tick %s (the last claimed: %s)", ErrTickTaken, schedule,
			tick.UTC().Format(time.RFC3339Nano), time.UnixMicro(n[1]).UTC().Format(time.RFC3339Nano))
	case enqueueLimited:
		return Receipt{}, &RateLimitedError{Tenant: job.Tenant, Policy: *tp.Admission, Decision: algorithms.Decision{
			Limit: capacity, Remaining: n[1], ResetAfter: time.Duration(n[2]) * time.Microsecond, RetryAfter: time.Duration(n[3]) * time.Microsecond,
		}}
	}
	return Receipt{}, fmt.Errorf("sluice: enqueue to %q: unexpected reply %v", p.cfg.Queue, v)
}

// The enqueue script's replies (queue_enqueue.lua).
const (
	enqueueQueued     = "queued"      // {"queued", depth, remaining, reset µs}
	enqueueFull       = "full"        // {"full", depth, bound, 0}
	enqueueTenantFull = "tenant_full" // {"tenant_full", tenant depth, tenant bound, 0}
	enqueueLimited    = "limited"     // {"limited", remaining, reset µs, retry µs}
	enqueueDuplicate  = "duplicate"   // {"duplicate", 0, 0, 0}
	enqueueTickTaken  = "tick_taken"  // {"tick_taken", last tick µs, 0, 0}
)

// tickMicros is the enqueue script's tick argument: "" for a job that is
// no schedule's tick.
func tickMicros(schedule string, tick time.Time) string {
	if schedule == "" {
		return ""
	}
	return strconv.FormatInt(tick.UnixMicro(), 10)
}

// Stats is a snapshot of the waiting room.
type Stats struct {
	// Depth counts the jobs waiting to start, which Bound bounds: in the
	// waiting room, or in asynq's pending list.
	Depth int64
	// HandedOver counts the tasks in asynq's pending list (at most
	// Prefetch, and asynq's own retries that are due).
	HandedOver int64
	// Tenants counts tenants with jobs waiting, asleep or not.
	Tenants int64
	// Sleeping counts tenants skipped until their throttle has room.
	Sleeping int64
	// Later counts the jobs not due yet (Job.RunAt), which Depth
	// includes.
	Later int64
	// ByClass counts the jobs waiting (not yet handed to asynq) per
	// tenant metrics class.
	ByClass map[string]int64
}

// Stats reads the waiting room's counters (a handful of commands).
func (p *Producer) Stats(ctx context.Context) (Stats, error) {
	type shardStats struct {
		depth, classes                   *redis.MapStringStringCmd
		handed, tenants, sleeping, later *redis.IntCmd
		meta                             *redis.StringCmd
	}
	pipe := p.client.Pipeline()
	all := make([]shardStats, len(p.shards))
	for i, k := range p.shards {
		all[i] = shardStats{
			meta:     pipe.HGet(ctx, k.meta, "depth"),
			handed:   pipe.LLen(ctx, k.asynqPending),
			tenants:  pipe.SCard(ctx, k.members),
			sleeping: pipe.ZCard(ctx, k.sleep),
			later:    pipe.ZCard(ctx, k.later),
			classes:  pipe.HGetAll(ctx, k.cdepth),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, err
	}
	st := Stats{ByClass: map[string]int64{}}
	for _, sh := range all {
		d, _ := sh.meta.Int64()
		st.Depth += d + sh.handed.Val()
		st.HandedOver += sh.handed.Val()
		st.Tenants += sh.tenants.Val()
		st.Sleeping += sh.sleeping.Val()
		st.Later += sh.later.Val()
		// The scripts count every class but the default one (most jobs,
		// one command less each); the default class has the rest of the
		// depth.
		rest := d
		for c, v := range sh.classes.Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			if n > 0 {
				st.ByClass[c] += n
				rest -= n
			}
		}
		if rest > 0 {
			st.ByClass[defaultClass] += rest
		}
	}
	return st, nil
}

// TenantDepth returns tenant's backlog, which TenantBound bounds: its
// jobs in the waiting room, not yet handed to asynq, due or for later.
func (p *Producer) TenantDepth(ctx context.Context, tenant string) (int64, error) {
	k, enc, list, err := p.shards.tenant(tenant)
	if err != nil {
		return 0, err
	}
	pipe := p.client.Pipeline()
	due := pipe.LLen(ctx, list)
	later := pipe.HGet(ctx, k.ldepth, enc)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	n, _ := later.Int64()
	return due.Val() + n, nil
}

// Sleeper is a tenant skipped by the dispatcher until a time: its
// downstream's next slot is too far away, the downstream is paused, every
// concurrency lease was held, or a handler rescheduled its job.
type Sleeper struct {
	// Tenant is the tenant's id (its first 64 bytes).
	Tenant string
	// Until is when it rejoins the drain.
	Until time.Time
	// Why says which limit holds it: "slot: …", "pause: …", "lease: …",
	// or a handler's reason for Reschedule.
	Why string
}

// Sleepers returns up to n of the sleeping tenants, the soonest to wake
// first (two commands a shard).
func (p *Producer) Sleepers(ctx context.Context, n int) ([]Sleeper, error) {
	if n <= 0 {
		return nil, nil
	}
	var out []Sleeper
	for _, k := range p.shards {
		zs, err := p.client.ZRangeWithScores(ctx, k.sleep, 0, int64(n-1)).Result()
		if err != nil {
			return nil, err
		}
		if len(zs) == 0 {
			continue
		}
		fields := make([]string, len(zs))
		for i, z := range zs {
			fields[i], _ = z.Member.(string)
		}
		whys, err := p.client.HMGet(ctx, k.why, fields...).Result()
		if err != nil {
			return nil, err
		}
		for i, z := range zs {
			// Every script that puts a tenant to sleep says why in the same step.
			text, _ := whys[i].(string)
			tenant, why, _ := strings.Cut(text, "\t")
			out = append(out, Sleeper{Tenant: tenant, Until: time.UnixMicro(int64(z.Score)), Why: why})
		}
	}
	slices.SortStableFunc(out, func(a, b Sleeper) int { return a.Until.Compare(b.Until) })
	return out[:min(n, len(out))], nil
}

// sleepText is what the why hash keeps of a sleeping tenant: its id, cut
// to 64 bytes, and the reason, cut to 200.
func sleepText(tenant, why string) string {
	return strings.ReplaceAll(tenant[:min(len(tenant), 64)], "\t", " ") + "\t" + why[:min(len(why), 200)]
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisconn"
)

// DefaultMemoryHeadroom is the share of Redis's maxmemory that Enqueue
// leaves to the workers by default (Config.MemoryHeadroom).
const DefaultMemoryHeadroom = 0.10

// memorySampleEvery is how old a sample of Redis's memory may get before
// Enqueue reads INFO memory again.
const memorySampleEvery = time.Second

// entryCost estimates what Redis's used_memory grows by for a waiting
// job whose entry is n bytes: the entry, a quarter more for the
// allocator's size classes, and 64 for the list node and counters.
// Measured over 10,000 jobs: entries of 280, 664 and 4,265 bytes cost
// 334, 747 and 5,168 bytes (docs/reliability.md).
func entryCost(n int) int64 { return int64(n + n/4 + 64) }

var (
	// ErrRedisFull is wrapped by *RedisFullError: Redis is out of memory
	// (or so near its maxmemory that sluice keeps the rest for the
	// workers). Nothing was written; retry once the workers have drained
	// jobs, or give Redis more memory.
	ErrRedisFull = errors.New("sluice: Redis is out of memory")
	// ErrRedisEvicts is wrapped by *RedisEvictsError: Redis may evict
	// keys, and the Producer was not told to allow it.
	ErrRedisEvicts = errors.New("sluice: Redis evicts keys")
)

// RedisFullError: Redis is out of memory. Either sluice refused the job
// before Redis would (Used is above Limit, the share of Max that Enqueue
// may fill), or Redis itself refused a write with its OOM error (Err).
type RedisFullError struct {
	Queue string
	// Addr is the Redis server (the fullest master of a cluster).
	Addr string
	// Used, Limit and Max are used_memory, the most Enqueue lets it
	// reach, and maxmemory, in bytes, when sluice refused; zero when
	// Redis did.
	Used, Limit, Max int64
	// Err is Redis's own OOM error, when Redis refused.
	Err error
}

func (e *RedisFullError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: enqueue to %q refused by Redis (%v); retry once the workers have drained jobs, or give Redis more memory",
			ErrRedisFull, e.Queue, strings.TrimSpace(e.Err.Error()))
	}
	return fmt.Sprintf("%v: enqueue to %q refused: Redis at %s uses %s of its maxmemory %s, above the %s that producers may fill (the rest is kept for the workers to drain); retry once the workers have drained jobs, or give Redis more memory",
		ErrRedisFull, e.Queue, e.Addr, redisconn.Bytes(e.Used), redisconn.Bytes(e.Max), redisconn.Bytes(e.Limit))
}

// Unwrap returns ErrRedisFull, and Redis's own error when there is one.
func (e *RedisFullError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRedisFull, e.Err}
	}
	return []error{ErrRedisFull}
}

// RedisEvictsError: a Redis server has a maxmemory and a maxmemory-policy
// other than noeviction, so it may delete any key (the volatile-*
// policies: any key with a TTL, such as a throttle's or a tenant's
// admission state) when full. Set maxmemory-policy to noeviction, or
// Config.AllowEviction.
type RedisEvictsError struct {
	Addr   string
	Policy string
	Max    int64
}

func (e *RedisEvictsError) Error() string {
	m := redisconn.Memory{Addr: e.Addr, Policy: e.Policy, Max: e.Max, Known: true}
	return fmt.Sprintf("%v: %s; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)", ErrRedisEvicts, m.EvictionProblem())
}

// Unwrap returns ErrRedisEvicts.
func (e *RedisEvictsError) Unwrap() error { return ErrRedisEvicts }

// isOOM reports whether err is Redis's out-of-memory refusal ("OOM
// command not allowed when used memory > 'maxmemory'").
func isOOM(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// memoryGate is a Producer's view of Redis's memory: INFO memory of every
// master, read at most every memorySampleEvery, or sooner once this
// producer has written a sixteenth of the headroom since (so that one
// fast producer cannot overshoot by more between samples).
type memoryGate struct {
	mu       sync.Mutex
	at       time.Time // of the last sample; zero: none yet
	fullest  redisconn.Memory
	evicts   *redisconn.Memory // a master that evicts, if any
	limit    int64             // what used_memory may reach; 0: no check
	written  int64             // bytes this producer wrote since the sample
	resample int64             // written bytes that call for a new sample
	shardsOK bool              // the queue's shard count was checked
}

// sample reads INFO memory of every master now.
func (p *Producer) sample(ctx context.Context) error {
	g := &p.mem
	mems, err := redisconn.ReadMemory(ctx, p.client)
	if err != nil {
		return fmt.Errorf("sluice: queue %q: reading Redis's memory (INFO memory): %w", p.cfg.Queue, err)
	}
	g.at, g.written, g.limit, g.resample, g.evicts = time.Now(), 0, 0, 0, nil
	g.fullest = redisconn.Memory{}
	worst := -1.0
	for _, m := range mems {
		if m.Evicts() && g.evicts == nil {
			g.evicts = &m
		}
		if !m.Known || m.Max <= 0 {
			continue
		}
		// The fullest master by its share of its own maxmemory.
		if r := float64(m.Used) / float64(m.Max); r > worst {
			worst, g.fullest = r, m
		}
	}
	if worst >= 0 && p.cfg.MemoryHeadroom >= 0 {
		head := redisconn.Headroom(g.fullest.Max, p.cfg.MemoryHeadroom)
		g.limit = g.fullest.Max - head
		g.resample = max(head/16, 1)
	}
	return nil
}

// roomFor checks, before a job of n bytes is written, that Redis neither
// evicts (unless allowed) nor is above the share of maxmemory producers
// may fill, and counts the bytes.
func (p *Producer) roomFor(ctx context.Context, n int) error {
	g := &p.mem
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.shardsOK {
		if err := checkShards(ctx, p.client, p.cfg.Prefix, p.cfg.Queue, p.cfg.Shards); err != nil {
			return err
		}
		g.shardsOK = true
	}
	if g.at.IsZero() || time.Since(g.at) >= memorySampleEvery || (g.resample > 0 && g.written >= g.resample) {
		if err := p.sample(ctx); err != nil {
			return err
		}
	}
	if g.evicts != nil && !p.cfg.AllowEviction {
		return &RedisEvictsError{Addr: g.evicts.Addr, Policy: g.evicts.Policy, Max: g.evicts.Max}
	}
	if g.limit > 0 && g.fullest.Used+g.written > g.limit {
		return &RedisFullError{Queue: p.cfg.Queue, Addr: g.fullest.Addr, Used: g.fullest.Used + g.written, Limit: g.limit, Max: g.fullest.Max}
	}
	g.written += entryCost(n)
	return nil
}

// CheckRedis reads INFO memory of every Redis master now, as Enqueue
// does at its first call and about every second after, and returns a
// *RedisEvictsError when one may evict keys (whatever
// Config.AllowEviction says: Enqueue heeds it, CheckRedis reports), or
// the error reading it. The worker and the enqueue CLI call it at start,
// to refuse an evicting Redis, or warn of one they were told to allow,
// before anything is written. A Redis whose INFO memory has no maxmemory
// fields (miniredis, an INFO an ACL refuses) passes: nothing can be
// checked.
func (p *Producer) CheckRedis(ctx context.Context) error {
	g := &p.mem
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := p.sample(ctx); err != nil {
		return err
	}
	if g.evicts != nil {
		return &RedisEvictsError{Addr: g.evicts.Addr, Policy: g.evicts.Policy, Max: g.evicts.Max}
	}
	return nil
}

package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
)

// EmbeddedRedis is the Config.RedisURL (and -redis value) that starts an
// in-memory Redis (miniredis) on a loopback port, without a password, for
// trials: every job in it is lost when Run returns.
const EmbeddedRedis = "embedded"

// connect returns the worker's Redis client, checked with a PING: the
// program's Config.Redis, a client built from the URL settings, or an
// embedded Redis for EmbeddedRedis. closer closes what connect made;
// embedded says the Redis is the embedded one.
func (w *Worker) connect(ctx context.Context) (c redis.UniversalClient, closer func(), embedded bool, err error) {
	if w.cfg.Redis != nil {
		c, closer = w.cfg.Redis, func() {}
	} else if w.cfg.RedisURL == EmbeddedRedis {
		e, stop, err := redisconn.StartEmbedded()
		if err != nil {
			return nil, nil, false, err
		}
		w.log.Warn(redisconn.EmbeddedWarning(e.Options().Addr))
		return e, stop, true, nil
	} else {
		f := redisconn.Flags{URL: w.cfg.RedisURL, Cluster: w.cfg.RedisCluster, CAFile: w.cfg.RedisCAFile}
		if c, err = f.Client(); err != nil {
			return nil, nil, false, err
		}
		closer = func() { c.Close() }
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		closer()
		return nil, nil, false, fmt.Errorf("connecting to Redis: %w", err)
	}
	return c, closer, false, nil
}

// checkRedis reads every master's memory settings at start and refuses a
// Redis that may evict keys, unless allow (then it warns). A Redis whose
// settings cannot be read is run on with a warning, but for the embedded
// one, which has none.
func checkRedis(ctx context.Context, client redis.UniversalClient, allow, embedded bool, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	mems, err := redisconn.ReadMemory(ctx, client)
	if err != nil {
		return fmt.Errorf("reading Redis's memory settings (INFO memory): %w", err)
	}
	for _, m := range mems {
		switch {
		case !m.Known && !embedded:
			log.Warn("sluice: cannot read Redis's memory settings: its eviction policy is not checked, and producers keep no headroom for the drain", "redis", m.Addr, "why", m.Why)
		case m.Evicts() && allow:
			log.Warn("sluice: WARNING: "+m.EvictionProblem()+"; running anyway (AllowEvictingRedis, -allow-evicting-redis): set maxmemory-policy noeviction", "redis", m.Addr)
		case m.Evicts():
			e := &queue.RedisEvictsError{Addr: m.Addr, Policy: m.Policy, Max: m.Max}
			return fmt.Errorf("%w, or set AllowEvictingRedis (-allow-evicting-redis) to run anyway", e)
		}
	}
	return nil
}

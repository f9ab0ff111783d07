package workercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
)

// embeddedURL is the -redis value that asks for the embedded Redis.
const embeddedURL = "embedded"

// notConfigured is the worker's error without a Redis: the enqueue CLI's,
// and the way to the embedded one.
var notConfigured = errors.New(redisconn.NotConfigured + `; "-redis embedded" runs an in-memory Redis without a password, whose jobs are lost when the worker exits (-demo uses one)`)

// connect returns a client for the configured Redis (a -redis-ca alone is
// Client's error), or starts an embedded one (miniredis on a loopback
// port) for -redis embedded or the demo without -redis. The closer stops
// what was started; embedded says which it was.
func connect(ctx context.Context, f redisconn.Flags, demo bool, log io.Writer) (c redis.UniversalClient, closer func(), embedded bool, err error) {
	if f.URL == embeddedURL && f.Cluster != "" {
		return nil, nil, false, errors.New("-redis embedded and -redis-cluster: choose one")
	}
	if f.URL != embeddedURL && (f.Configured() || f.CAFile != "") {
		c, err := f.Client()
		if err != nil {
			return nil, nil, false, err
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return nil, nil, false, fmt.Errorf("connecting to Redis: %w", err)
		}
		return c, func() { c.Close() }, false, nil
	}
	if f.URL != embeddedURL && !demo {
		return nil, nil, false, notConfigured
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, false, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	fmt.Fprintf(log, "sluice: WARNING: started an embedded Redis (miniredis) at %s, in memory and without a password: every job in it is lost when the worker exits (for trials; give -redis a redis:// URL to keep jobs)\n", m.Addr())
	c = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, func() { c.Close(); m.Close() }, true, nil
}

// checkRedis reads every master's memory settings at start and refuses a
// Redis that may evict keys, unless -allow-evicting-redis (then it
// warns). A Redis whose settings cannot be read is run on with a warning,
// but for the embedded one, which has none.
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
			log.Warn("sluice: WARNING: "+m.EvictionProblem()+"; running anyway (-allow-evicting-redis): set maxmemory-policy noeviction", "redis", m.Addr)
		case m.Evicts():
			e := &queue.RedisEvictsError{Addr: m.Addr, Policy: m.Policy, Max: m.Max}
			return fmt.Errorf("%w, or pass -allow-evicting-redis to run anyway", e)
		}
	}
	return nil
}

// redisWatch checks, every -redis-check-every, that Redis kept its data
// (redisconn.Markers) and how full it is, for the log and the metrics.
type redisWatch struct {
	client   redis.UniversalClient
	log      *slog.Logger
	every    time.Duration
	headroom float64 // the producers' share of maxmemory left free

	markers  *redisconn.Markers
	evicting bool // last seen, to log a change once (the start is checkRedis's)
	seen     bool // evicting was read once

	lost     prometheus.Counter
	evicts   prometheus.Gauge
	used     prometheus.Gauge
	refusing prometheus.Gauge
}

func newRedisWatch(client redis.UniversalClient, every time.Duration, log *slog.Logger, reg prometheus.Registerer) (*redisWatch, error) {
	w := &redisWatch{client: client, log: log, every: every, headroom: queue.DefaultMemoryHeadroom,
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_redis_data_lost_total",
			Help: "Times this worker found Redis without its data: a marker key gone (a restart without persistence, a flush, an eviction) or replaced."}),
		evicts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_redis_evicting",
			Help: "1 when a Redis master has a maxmemory-policy that may evict keys (the worker runs on it only with -allow-evicting-redis)."}),
		used: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_redis_memory_used_ratio",
			Help: "used_memory over maxmemory of the fullest Redis master (0 without a maxmemory)."}),
		refusing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_redis_memory_refuse_ratio",
			Help: "The share of maxmemory above which producers refuse jobs as Redis out of memory."}),
	}
	w.refusing.Set(1 - w.headroom)
	for _, c := range []prometheus.Collector{w.lost, w.evicts, w.used, w.refusing} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// loop checks at once, then every w.every, until ctx is done.
func (w *redisWatch) loop(ctx context.Context) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		w.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// check runs one round: the markers, then the memory settings. Errors
// (Redis unreachable) are left to the rest of the worker to report.
func (w *redisWatch) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.every)
	defer cancel()
	if w.markers == nil {
		m, created, err := redisconn.NewMarkers(ctx, w.client)
		if err != nil {
			w.log.Debug("sluice: placing the data-loss markers", "err", err)
			return
		}
		w.markers = m
		for _, c := range created {
			w.log.Info("sluice: wrote the data-loss marker: the first worker on this Redis, or it lost its data while no worker ran", "redis", c.Addr, "key", c.Key)
		}
	} else if lost, err := w.markers.Check(ctx); err != nil {
		w.log.Debug("sluice: checking the data-loss markers", "err", err)
	} else {
		for _, l := range lost {
			w.lost.Inc()
			what := "the marker key is gone (restarted without persistence, flushed, or evicted)"
			if !l.Vanished {
				what = "the marker key holds another value (another Redis behind the address, or another worker re-created a lost one)"
			}
			w.log.Error("sluice: Redis lost its data: "+what+"; jobs accepted before may be lost, and the queue's counters start again from nothing",
				"redis", l.Addr, "key", l.Key, "marker_was", l.Was, "marker_now", l.Now)
		}
	}
	mems, err := redisconn.ReadMemory(ctx, w.client)
	if err != nil {
		return
	}
	evicting, ratio := false, 0.0
	for _, m := range mems {
		if m.Evicts() {
			evicting = true
			if w.seen && !w.evicting {
				w.log.Warn("sluice: WARNING: "+m.EvictionProblem()+"; producers refuse jobs unless allowed: set maxmemory-policy noeviction", "redis", m.Addr)
			}
		}
		if m.Known && m.Max > 0 {
			ratio = max(ratio, float64(m.Used)/float64(m.Max))
		}
	}
	w.evicting, w.seen = evicting, true
	w.evicts.Set(map[bool]float64{false: 0, true: 1}[evicting])
	w.used.Set(ratio)
}

// RegisterRedisMetrics registers the worker's Redis metrics
// (sluice_redis_*) with reg, as newWorker does, for checks of what the
// worker exports (internal/deploytest).
func RegisterRedisMetrics(reg prometheus.Registerer) error {
	_, err := newRedisWatch(nil, time.Second, nil, reg)
	return err
}

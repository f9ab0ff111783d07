package redisconn

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Watch checks, every few seconds, that Redis kept its data (Markers) and
// how full it is, for the worker's log and metrics (sluice_redis_*).
type Watch struct {
	client redis.UniversalClient
	log    *slog.Logger
	every  time.Duration

	share    float64 // queue.Config.MemoryHeadroom
	markers  *Markers
	evicting bool // last seen, to log a change once (the start's check is the worker's)
	seen     bool // evicting was read once

	lost     prometheus.Counter
	evicts   prometheus.Gauge
	used     prometheus.Gauge
	refusing prometheus.Gauge
}

// NewWatch returns a Watch of client that checks every every, logs to
// log, and registers its metrics with reg. headroom is the producers'
// share of maxmemory left free (queue.Config.MemoryHeadroom), for
// sluice_redis_memory_refuse_ratio.
func NewWatch(client redis.UniversalClient, every time.Duration, headroom float64, log *slog.Logger, reg prometheus.Registerer) (*Watch, error) {
	w := &Watch{client: client, log: log, every: every, share: headroom,
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_redis_data_lost_total",
			Help: "Times this worker found Redis without its data: a marker key gone (a restart without persistence, a flush, an eviction) or replaced."}),
		evicts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_redis_evicting",
			Help: "1 when a Redis master has a maxmemory-policy that may evict keys (the worker runs on it only with -allow-evicting-redis)."}),
		used: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_redis_memory_used_ratio",
			Help: "used_memory over maxmemory of the fullest Redis master (0 without a maxmemory)."}),
		refusing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_redis_memory_refuse_ratio",
			Help: "The share of maxmemory above which producers refuse jobs as Redis out of memory, on the fullest master (a tenth below 1 by default, at least 2 MiB below it)."}),
	}
	w.refusing.Set(1 - headroom)
	for _, c := range []prometheus.Collector{w.lost, w.evicts, w.used, w.refusing} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Loop checks at once, then every w.every, until ctx is done.
func (w *Watch) Loop(ctx context.Context) {
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
func (w *Watch) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.every)
	defer cancel()
	if w.markers == nil {
		m, created, err := NewMarkers(ctx, w.client)
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
	mems, err := ReadMemory(ctx, w.client)
	if err != nil {
		return
	}
	evicting, ratio, refuse := false, 0.0, 0.0
	for _, m := range mems {
		if m.Evicts() {
			evicting = true
			if w.seen && !w.evicting {
				w.log.Warn("sluice: WARNING: "+m.EvictionProblem()+"; producers refuse jobs unless allowed: set maxmemory-policy noeviction", "redis", m.Addr)
			}
		}
		if !m.Known || m.Max <= 0 {
			continue
		}
		// The fullest master by its share of its own maxmemory, as the
		// producers judge it.
		if r := float64(m.Used) / float64(m.Max); r >= ratio {
			ratio = r
			refuse = 1 - float64(Headroom(m.Max, w.share))/float64(m.Max)
		}
	}
	w.evicting, w.seen = evicting, true
	w.evicts.Set(map[bool]float64{false: 0, true: 1}[evicting])
	w.used.Set(ratio)
	if refuse > 0 && w.share >= 0 {
		w.refusing.Set(refuse)
	}
}

// MinHeadroom is the least room, in bytes, that producers leave free of
// a Redis's maxmemory for the workers whatever the share (at most half of
// a smaller maxmemory): a worker process starting on a full Redis writes
// about 0.8 MB before its first jobs are done (asynq's server state, the
// tasks handed over, its connections), and each further process 0.15 to
// 0.2 MB, whatever the queue's size; a tenth of a few megabytes is less.
const MinHeadroom = 2 << 20

// Headroom is the room, in bytes, that producers leave free of a Redis
// whose maxmemory is maxmemory (queue.Config.MemoryHeadroom): share of it,
// and at least MinHeadroom or half of maxmemory, whichever is less.
func Headroom(maxmemory int64, share float64) int64 {
	return int64(math.Max(float64(maxmemory)*share, float64(min(MinHeadroom, maxmemory/2))))
}

// RegisterWatchMetrics registers a Watch's metrics (sluice_redis_*) with
// reg, as the worker does, for checks of what the worker exports
// (internal/deploytest).
func RegisterWatchMetrics(reg prometheus.Registerer) error {
	_, err := NewWatch(nil, time.Second, 0, nil, reg)
	return err
}

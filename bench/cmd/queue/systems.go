package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
)

// queueName is the asynq queue both systems use ("default", as asynq's
// client does without an option).
const queueName = "default"

// system is one side of a comparison: a way to enqueue job i and a worker
// process that calls back with the index of each job it starts.
type system interface {
	name() string
	// enqueue adds job i of tenant with payload.
	enqueue(ctx context.Context, i int, tenant string, payload []byte) error
	// start starts a worker process that calls started(i) at the start of
	// each job's (no-op) handler.
	start(started func(i int)) error
	// stop shuts the worker process down.
	stop()
}

// jobIndex reads the job's index from the first 8 bytes of its payload.
func jobIndex(payload []byte) int {
	if len(payload) < 8 {
		return -1
	}
	return int(binary.BigEndian.Uint64(payload[:8]))
}

// bare is plain asynq: Client.Enqueue of a task, and an asynq Server.
type bare struct {
	rc     redis.UniversalClient // the worker's client
	client *asynq.Client         // on the producers' client
	poll   time.Duration
	conc   int
	srv    *asynq.Server
}

func newBare(producers, worker redis.UniversalClient, conc int, poll time.Duration) *bare {
	return &bare{rc: worker, client: asynq.NewClientFromRedisClient(producers), poll: poll, conc: conc}
}

func (b *bare) name() string { return "asynq" }

func (b *bare) enqueue(ctx context.Context, _ int, _ string, payload []byte) error {
	_, err := b.client.EnqueueContext(ctx, asynq.NewTask("noop", payload))
	return err
}

// admitted is what an asynq user writes for per-tenant admission without
// sluice: redis_rate's Allow (GCRA) for the job's tenant, then asynq's
// Client.Enqueue: two round trips, and no bound. Phase 1 runs it beside
// the two systems; its worker is bare asynq's.
type admitted struct {
	*bare
	lim *redis_rate.Limiter
}

func newAdmitted(producers, worker redis.UniversalClient, conc int, poll time.Duration) *admitted {
	return &admitted{bare: newBare(producers, worker, conc, poll), lim: redis_rate.NewLimiter(producers)}
}

func (a *admitted) name() string { return "asynq+rate" }

// hugeRate is hugeBucket for redis_rate.
var hugeRate = redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Second}

func (a *admitted) enqueue(ctx context.Context, i int, tenant string, payload []byte) error {
	r, err := a.lim.Allow(ctx, tenant, hugeRate)
	if err != nil {
		return err
	}
	if r.Allowed == 0 {
		return fmt.Errorf("redis_rate refused tenant %s", tenant)
	}
	return a.bare.enqueue(ctx, i, tenant, payload)
}

// newAsynqServer is the bare asynq worker both baselines run: queueName
// only, polling every poll.
func newAsynqServer(rc redis.UniversalClient, conc int, poll time.Duration) *asynq.Server {
	return asynq.NewServerFromRedisClient(rc, asynq.Config{
		Concurrency:       conc,
		Queues:            map[string]int{queueName: 1},
		TaskCheckInterval: poll,
		LogLevel:          asynq.WarnLevel,
	})
}

func (b *bare) start(started func(int)) error {
	b.srv = newAsynqServer(b.rc, b.conc, b.poll)
	return b.srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		started(jobIndex(t.Payload()))
		return nil
	}))
}

func (b *bare) stop() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv = nil
	}
}

// sluiceSys is sluice: Producer.Enqueue (admission and the bound in one
// script) and a queue.Server (the dispatcher feeding asynq's server).
type sluiceSys struct {
	rc  redis.UniversalClient
	p   *queue.Producer
	cfg queue.ServerConfig
	srv *queue.Server
}

// hugeBucket admits everything the benchmark sends: a token bucket of a
// billion per second, so that admission runs in full but never refuses.
var hugeBucket = algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 1_000_000_000, Period: time.Second}

func newSluice(producers, worker redis.UniversalClient, bound int64, admission *algorithms.Policy, conc int, poll, retention time.Duration) (*sluiceSys, error) {
	cfg := queue.Config{Queue: queueName, Bound: bound}
	if admission != nil {
		pol := *admission
		cfg.Tenants = func(string) queue.TenantPolicy { return queue.TenantPolicy{Admission: &pol} }
	}
	p, err := queue.NewProducer(producers, &cfg)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &sluiceSys{rc: worker, p: p, cfg: queue.ServerConfig{
		Queue:        queueName,
		Concurrency:  conc,
		PollInterval: poll,
		Retention:    retention,
		Logger:       log,
	}}, nil
}

func (s *sluiceSys) name() string { return "sluice" }

// enqueue leaves the job's id to the Producer (a random one), as a caller
// that has none would.
func (s *sluiceSys) enqueue(ctx context.Context, _ int, tenant string, payload []byte) error {
	_, err := s.p.Enqueue(ctx, queue.Job{Tenant: tenant, Type: "noop", Payload: payload})
	return err
}

func (s *sluiceSys) start(started func(int)) error {
	srv, err := queue.NewServer(s.rc, &s.cfg)
	if err != nil {
		return err
	}
	if err := srv.Start(queue.HandlerFunc(func(ctx context.Context, j *queue.Job) error {
		started(jobIndex(j.Payload))
		return nil
	})); err != nil {
		return fmt.Errorf("sluice server: %w", err)
	}
	s.srv = srv
	return nil
}

func (s *sluiceSys) stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv = nil
	}
}

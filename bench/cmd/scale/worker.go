package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// workerArg is the hidden first argument that makes this binary a worker
// process of one of the peers, recipe or bare.
const workerArg = "worker"

// The peers, and sluice.
const (
	sysSluice = "sluice"
	sysRecipe = "recipe" // asynq + redis_rate per tenant in the handler
	sysBare   = "bare"   // asynq, no limiter
)

// taskType is the asynq task type of the peers' jobs.
const taskType = "scale:call"

// startedLine is what a peer's worker prints once its asynq server runs.
const startedLine = "scale worker started"

// callPayload is a peer's job: the tenant and the URL to GET.
type callPayload struct {
	Tenant string `json:"t"`
	URL    string `json:"u"`
}

// rateLimitError is the recipe's answer to a refusal, by its own limiter
// or by the API: not a failure (IsFailure), retried after RetryAfter
// (RetryDelayFunc), as asynq's wiki recipe for rate limiting does.
type rateLimitError struct {
	RetryAfter time.Duration
	source     string
}

func (e *rateLimitError) Error() string {
	return fmt.Sprintf("rate limited by %s: retry after %v", e.source, e.RetryAfter)
}

// workerConfig is what a peer's worker process is started with.
type workerConfig struct {
	system      string
	redis       string // host:port of a standalone server
	cluster     string // comma-separated cluster addresses, instead
	concurrency int
	key         string // the recipe's limiter key: "tenant" (one per tenant) or "global"
	rate, burst int64
	// check is asynq's DelayedTaskCheckInterval: how often retries that
	// are due move back to the queue; 0 for asynq's default (5 s).
	check time.Duration
}

// args is the command line that starts the worker process.
func (c workerConfig) args() []string {
	return []string{workerArg, "-system", c.system, "-redis", c.redis, "-redis-cluster", c.cluster,
		"-concurrency", strconv.Itoa(c.concurrency), "-key", c.key,
		"-rate", strconv.FormatInt(c.rate, 10), "-burst", strconv.FormatInt(c.burst, 10), "-check", c.check.String()}
}

// newRedis returns a client of the standalone server at addr, or of the
// cluster at the comma-separated addresses of cluster when that is set.
func newRedis(addr, cluster string, pool int) redis.UniversalClient {
	if cluster != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster, ","), PoolSize: pool})
	}
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool})
}

// workerMain runs a peer's worker process: an asynq server of -concurrency
// goroutines on the default queue, until SIGTERM or SIGINT.
func workerMain(args []string) error {
	var c workerConfig
	fs := flag.NewFlagSet("scale worker", flag.ContinueOnError)
	fs.StringVar(&c.system, "system", sysRecipe, "recipe (redis_rate in the handler) or bare (no limiter)")
	fs.StringVar(&c.redis, "redis", "", "host:port of the redis-server")
	fs.StringVar(&c.cluster, "redis-cluster", "", "comma-separated cluster addresses, instead of -redis")
	fs.IntVar(&c.concurrency, "concurrency", 32, "asynq's Concurrency")
	fs.StringVar(&c.key, "key", "tenant", "the recipe's limiter key: tenant (one per tenant) or global")
	fs.Int64Var(&c.rate, "rate", 2, "the recipe's limit, calls a second")
	fs.Int64Var(&c.burst, "burst", 40, "the recipe's burst")
	fs.DurationVar(&c.check, "check", 0, "asynq's DelayedTaskCheckInterval (0: its default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.system != sysRecipe && c.system != sysBare {
		return fmt.Errorf("-system must be %s or %s; got %q", sysRecipe, sysBare, c.system)
	}
	if c.key != "tenant" && c.key != "global" {
		return fmt.Errorf("-key must be tenant or global; got %q", c.key)
	}
	if (c.redis == "") == (c.cluster == "") {
		return errors.New("give one of -redis and -redis-cluster")
	}
	rc := newRedis(c.redis, c.cluster, c.concurrency+16)
	defer rc.Close()
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConns: c.concurrency, MaxIdleConnsPerHost: c.concurrency},
		Timeout:   30 * time.Second,
	}
	h := &peerHandler{system: c.system, client: client, global: c.key == "global",
		limit: redis_rate.Limit{Rate: int(c.rate), Burst: int(c.burst), Period: time.Second}}
	if c.system == sysRecipe {
		h.lim = redis_rate.NewLimiter(rc)
	}
	srv := asynq.NewServerFromRedisClient(rc, asynq.Config{
		Concurrency:              c.concurrency,
		Queues:                   map[string]int{"default": 1},
		LogLevel:                 asynq.WarnLevel,
		ShutdownTimeout:          5 * time.Second,
		DelayedTaskCheckInterval: c.check,
		IsFailure: func(err error) bool {
			var rl *rateLimitError
			return !errors.As(err, &rl)
		},
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			var rl *rateLimitError
			if errors.As(err, &rl) {
				return rl.RetryAfter
			}
			return asynq.DefaultRetryDelayFunc(n, err, t)
		},
	})
	mux := asynq.NewServeMux()
	mux.Handle(taskType, h)
	if err := srv.Start(mux); err != nil {
		return err
	}
	fmt.Println(startedLine)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

// peerHandler runs a peer's job: for the recipe, redis_rate's Allow for
// the job's tenant (or the one global key) first; then the GET.
type peerHandler struct {
	system string
	client *http.Client
	lim    *redis_rate.Limiter // the recipe's; nil for bare
	limit  redis_rate.Limit
	global bool
}

func (h *peerHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var p callPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	if h.lim != nil {
		key := "scale:" + p.Tenant
		if h.global {
			key = "scale:api"
		}
		res, err := h.lim.Allow(ctx, key, h.limit)
		if err != nil {
			return err
		}
		if res.Allowed == 0 {
			return &rateLimitError{RetryAfter: res.RetryAfter, source: "redis_rate"}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests && h.lim != nil:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return &rateLimitError{RetryAfter: time.Duration(max(secs, 1)) * time.Second, source: "the API"}
	}
	return fmt.Errorf("the API answered %s", resp.Status)
}

// Package enqueuecmd is the sluice producer CLI: one job from flags, many
// from JSON lines, and a stats view. cmd/enqueue's main only calls Main.
// Its exit codes (the Exit constants) tell a script why a job was refused.
package enqueuecmd

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/policycheck"
	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// Exit codes.
const (
	ExitOK          = 0 // every job accepted
	ExitFailure     = 1 // Redis unreachable or another failure
	ExitUsage       = 2 // bad usage or an invalid job (nothing enqueued for it)
	ExitRateLimited = 3 // refused by the tenant's admission policy
	ExitQueueFull   = 4 // refused: the queue or the tenant's backlog is full
	ExitDuplicate   = 5 // refused: a job with the same id is waiting in the queue
	ExitRedisFull   = 6 // refused: Redis is out of memory (retry once the workers have drained jobs)
)

// redisFullWait is how long -wait waits after an out-of-memory refusal.
const redisFullWait = 5 * time.Second

type options struct {
	redis                 redisconn.Flags
	policy, payload, file string
	runAt                 string
	wait, quiet, check    bool
	allowEvicting         bool
	maxWait, runIn        time.Duration
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `usage:
  enqueue -policy policy.yaml -tenant T -type X [-payload JSON] [-downstream D] [-id ID] [-cost N]
          [-run-at 2026-11-27T09:00:00Z | -run-in 10m]
  enqueue -policy policy.yaml -f jobs.jsonl     (or -f - for standard input; one JSON job per line:
          {"tenant":"t","type":"x","payload":{...},"downstream":"d","id":"...","cost":1,
           "run_in":"10m" or "run_at":"2026-11-27T09:00:00Z"})
  enqueue -policy policy.yaml stats
  enqueue -policy policy.yaml keys add|list|revoke|rotate ...   (API keys of POST /enqueue; enqueue keys help)
  enqueue -policy policy.yaml -check            (check the file, no Redis: exit 0 valid, 2 not)
  enqueue -policy policy.yaml why|list|cancel|delete ...   (enqueue why -h)

`)
	// Parse's own output goes nowhere: point the flag list at w.
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, `
exit codes: 0 accepted, 1 failure (e.g. Redis unreachable, or it evicts keys), 2 usage
            or invalid job, 3 rate limited, 4 queue full, 5 a job with that id is already
            queued, 6 Redis out of memory

-f reads and checks every line before it enqueues any: with a bad line it prints
file:line: reason for each on stderr, enqueues nothing and exits 2. Then it prints
one line per job to stdout, in file order:
  accepted <line> <id>
  refused <line> <reason>     reason: rate-limited, queue-full, redis-full, duplicate,
                              invalid, failed
and exits with the worst refusal's code (1 > 6 > 4 > 3 > 2 > 5), 0 if all were accepted.
To retry, send again only the lines refused as rate-limited, queue-full, redis-full or failed,
and any line not listed (after an interrupt): a duplicate's job is queued already,
and an "id" catches a second sending only while its job still waits to start.
`)
}

// Main runs the CLI and returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o options
	var job queue.Job // from the flags
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.redis.URL, "redis", os.Getenv("SLUICE_REDIS_URL"), "Redis URL, redis:// or rediss://, or redis+sentinel://host:port,.../master (env SLUICE_REDIS_URL)")
	fs.StringVar(&o.redis.Cluster, "redis-cluster", os.Getenv("SLUICE_REDIS_CLUSTER"), "comma-separated Redis Cluster addresses (env SLUICE_REDIS_CLUSTER)")
	fs.StringVar(&o.redis.CAFile, "redis-ca", os.Getenv("SLUICE_REDIS_CA"), "PEM file of the CAs to trust for rediss:// instead of the system's (env SLUICE_REDIS_CA)")
	fs.StringVar(&o.policy, "policy", os.Getenv("SLUICE_POLICY"), "policy file: the queue and the tenants' admission policies (env SLUICE_POLICY)")
	fs.StringVar(&job.Tenant, "tenant", "", "the job's tenant")
	fs.StringVar(&job.Type, "type", "", "the job's type (sluice.http for the built-in HTTP call)")
	fs.StringVar(&o.payload, "payload", "", "the job's payload (JSON for sluice.http jobs)")
	fs.StringVar(&job.ID, "id", "", "the job's id (default: a random one)")
	fs.StringVar(&job.Downstream, "downstream", "", "the downstream the job calls")
	fs.Int64Var(&job.Cost, "cost", 0, "the job's cost in admission and quota units (default 1)")
	fs.IntVar(&job.MaxRetry, "max-retry", 0, "retries on failure (default 25; -1 for none)")
	fs.StringVar(&o.runAt, "run-at", "", "when the job becomes due, RFC 3339 (default: at once)")
	fs.DurationVar(&o.runIn, "run-in", 0, "when the job becomes due, from now (e.g. 10m)")
	fs.StringVar(&o.file, "f", "", "read jobs as JSON lines from this file (- for standard input)")
	fs.BoolVar(&o.wait, "wait", false, "when refused, wait as the refusal says and try again (up to -max-wait)")
	fs.DurationVar(&o.maxWait, "max-wait", 5*time.Minute, "with -wait, the longest to keep trying one job")
	fs.BoolVar(&o.quiet, "q", false, "no progress line")
	fs.BoolVar(&o.check, "check", false, "check the -policy file and exit (0 valid, 2 not), printing every problem as file:line:column; no Redis needed")
	fs.BoolVar(&o.allowEvicting, "allow-evicting-redis", envBool("SLUICE_ALLOW_EVICTING_REDIS"), "write jobs to a Redis whose maxmemory-policy may evict keys, which loses jobs when it is full (env SLUICE_ALLOW_EVICTING_REDIS)")
	bad := func(problem any) int {
		fmt.Fprintln(stderr, "enqueue:", problem)
		return ExitUsage
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout, fs)
		return ExitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "enqueue:", err)
		usage(stderr, fs)
		return ExitUsage
	}
	if fs.Arg(0) == "keys" {
		return keys(ctx, o.redis, o.policy, fs.Args()[1:], stdout, stderr)
	}
	if o.check {
		if fs.NArg() > 0 {
			return bad(fmt.Sprintf("unexpected arguments %q", fs.Args()))
		}
		return policycheck.Run(o.policy, stdout, stderr)
	}
	if fs.NArg() > 0 && inspectCommands[fs.Arg(0)] {
		return inspectMain(ctx, fs.Args(), o, stdout, stderr)
	}
	stats := fs.NArg() == 1 && fs.Arg(0) == "stats"
	switch {
	case fs.NArg() > 0 && !stats:
		return bad(fmt.Sprintf("unexpected arguments %q", fs.Args()))
	case o.policy == "":
		return bad("-policy is required (the queue's name, bounds and tenants' policies come from it)")
	case !o.redis.Configured():
		return bad(redisconn.NotConfigured)
	case !stats && o.file == "" && (job.Tenant == "" || job.Type == ""):
		return bad("give -tenant and -type for one job, -f for many, or stats")
	}
	cfg, err := policy.Load(o.policy)
	if err != nil {
		return bad(err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// go-redis would print a line per failed dial before our one error.
	redisconn.RouteDriverLog(slog.New(slog.NewTextHandler(stderr, nil)))
	client, err := o.redis.Client()
	if err != nil {
		return bad(err)
	}
	defer client.Close()
	qc := cfg.QueueConfig()
	qc.AllowEviction = o.allowEvicting
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		return bad(err)
	}
	// An evicting Redis is refused before anything is written; stats
	// writes nothing, and only warns.
	if err := p.CheckRedis(ctx); errors.Is(err, queue.ErrRedisEvicts) && (o.allowEvicting || stats) {
		fmt.Fprintf(stderr, "enqueue: WARNING: %v; jobs written to it may be lost\n", err)
	} else if errors.Is(err, queue.ErrRedisEvicts) {
		fmt.Fprintf(stderr, "enqueue: %v, or pass -allow-evicting-redis to write jobs anyway\n", err)
		return ExitFailure
	} else if err != nil {
		fmt.Fprintln(stderr, "enqueue:", err)
		return ExitFailure
	}
	if stats {
		return showStats(ctx, p, cfg, stdout, stderr)
	}
	if o.file != "" {
		in, name := stdin, "stdin"
		if o.file != "-" {
			f, err := os.Open(o.file)
			if err != nil {
				return bad(err)
			}
			defer f.Close()
			in, name = f, o.file
		}
		return bulk(ctx, p, o, name, in, stdout, stderr)
	}
	job.Payload = []byte(o.payload)
	switch {
	case o.runAt != "" && o.runIn != 0:
		return bad("give -run-at or -run-in, not both")
	case o.runIn < 0:
		return bad(fmt.Sprintf("-run-in must not be negative, got %v", o.runIn))
	case o.runIn > 0:
		job.RunAt = time.Now().Add(o.runIn)
	case o.runAt != "":
		t, err := time.Parse(time.RFC3339Nano, o.runAt)
		if err != nil {
			return bad(fmt.Sprintf("-run-at: want RFC 3339, such as 2026-11-27T09:00:00Z: %v", err))
		}
		job.RunAt = t
	}
	r, code, err := one(ctx, p, job, o)
	if err != nil {
		explain(stderr, "", code, err)
		return code
	}
	fmt.Fprintf(stdout, "%s\n", r.ID)
	return code
}

// one enqueues job, waiting and retrying as refusals say when -wait is
// set, and returns the exit code and the last refusal.
func one(ctx context.Context, p *queue.Producer, job queue.Job, o options) (queue.Receipt, int, error) {
	deadline := time.Now().Add(o.maxWait)
	for {
		r, err := p.Enqueue(ctx, job)
		code, wait := classify(err)
		if !o.wait || (code != ExitRateLimited && code != ExitQueueFull && code != ExitRedisFull) || !time.Now().Add(wait).Before(deadline) {
			return r, code, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return r, ExitFailure, errors.New("interrupted")
		}
	}
}

// classify maps an Enqueue error to an exit code and how long to wait
// before trying again.
func classify(err error) (int, time.Duration) {
	var rl *queue.RateLimitedError
	switch {
	case err == nil:
		return ExitOK, 0
	case errors.As(err, &rl):
		return ExitRateLimited, rl.Decision.RetryAfter
	case errors.Is(err, queue.ErrQueueFull):
		return ExitQueueFull, time.Second
	case errors.Is(err, queue.ErrRedisFull):
		return ExitRedisFull, redisFullWait
	case errors.Is(err, queue.ErrDuplicateJob):
		return ExitDuplicate, 0
	case errors.Is(err, queue.ErrInvalidJob):
		return ExitUsage, 0
	}
	return ExitFailure, 0
}

// explain prints why a job was refused and what to do about it; where
// names the job's line in a file.
func explain(w io.Writer, where string, code int, err error) {
	fmt.Fprintf(w, "enqueue: %s%v\n", where, err)
	switch code {
	case ExitQueueFull:
		fmt.Fprintf(w, "enqueue: %sback off and retry in 1s\n", where)
	case ExitRedisFull:
		fmt.Fprintf(w, "enqueue: %sRedis is out of memory: retry in %v, once the workers have drained jobs, or give Redis more memory\n", where, redisFullWait)
	case ExitDuplicate: // waiting would not help: the id is free once a worker has taken that job
		fmt.Fprintf(w, "enqueue: %snot enqueued again; the job already queued will run (give another -id, or none for a random one)\n", where)
	}
}

// bulk enqueues a JSON lines file, as the usage describes: every line is
// checked first, then enqueued in order with one stdout line per job.
func bulk(ctx context.Context, p *queue.Producer, o options, name string, in io.Reader, stdout, stderr io.Writer) int {
	type entry struct {
		line int
		job  queue.Job
	}
	var jobs []entry
	bad := 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		job, err := queue.ParseJob([]byte(text))
		if err == nil {
			err = p.Check(job)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s:%d: %v\n", name, line, err)
			bad++
			continue
		}
		jobs = append(jobs, entry{line, job})
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(stderr, "enqueue: reading %s: %v; nothing enqueued\n", name, err)
		return ExitUsage
	}
	if bad > 0 {
		lines := "lines"
		if bad == 1 {
			lines = "line"
		}
		fmt.Fprintf(stderr, "enqueue: %d bad %s in %s; nothing enqueued\n", bad, lines, name)
		return ExitUsage
	}

	var accepted, refused int
	worst := ExitOK
	rank := map[int]int{ExitOK: 0, ExitDuplicate: 1, ExitUsage: 2, ExitRateLimited: 3, ExitQueueFull: 4, ExitRedisFull: 5, ExitFailure: 6}
	word := map[int]string{ExitDuplicate: "duplicate", ExitUsage: "invalid", ExitRateLimited: "rate-limited", ExitQueueFull: "queue-full", ExitRedisFull: "redis-full", ExitFailure: "failed"}
	last := time.Now()
	progress := func(end string) { // "\r" at most every 200ms, "\n" at the end
		if o.quiet || (end == "\r" && time.Since(last) < 200*time.Millisecond) {
			return
		}
		last = time.Now()
		fmt.Fprintf(stderr, "enqueue: %d of %d jobs, %d accepted, %d refused%s", accepted+refused, len(jobs), accepted, refused, end)
	}
	for _, e := range jobs {
		r, code, err := one(ctx, p, e.job, o)
		if err == nil {
			accepted++
			fmt.Fprintf(stdout, "accepted %d %s\n", e.line, r.ID)
		} else {
			refused++
			fmt.Fprintf(stdout, "refused %d %s\n", e.line, word[code])
			if rank[code] > rank[worst] {
				worst = code
			}
			if !o.quiet {
				fmt.Fprintln(stderr) // end the progress line
			}
			explain(stderr, fmt.Sprintf("%s:%d: ", name, e.line), code, err)
		}
		progress("\r")
		if ctx.Err() != nil {
			break
		}
	}
	progress("\n")
	return worst
}

func showStats(ctx context.Context, p *queue.Producer, cfg *policy.Config, stdout, stderr io.Writer) int {
	st, err := p.Stats(ctx)
	var sleepers []queue.Sleeper
	if err == nil {
		sleepers, err = p.Sleepers(ctx, 10)
	}
	if err != nil {
		fmt.Fprintln(stderr, "enqueue: stats:", err)
		return ExitFailure
	}
	fmt.Fprintf(stdout, "queue %s\n", cfg.Queue.Name)
	fmt.Fprintf(stdout, "  depth        %d of %d (waiting to start: in the waiting room, or in asynq's pending list)\n", st.Depth, cfg.Queue.Bound)
	fmt.Fprintf(stdout, "  pending      %d in asynq's pending list (prefetch %d)\n", st.HandedOver, cfg.Queue.Prefetch)
	fmt.Fprintf(stdout, "  later        %d not due yet (run_at), counted in the depth\n", st.Later)
	fmt.Fprintf(stdout, "  tenants      %d with jobs, %d asleep\n", st.Tenants, st.Sleeping)
	now := time.Now()
	for _, s := range sleepers {
		fmt.Fprintf(stdout, "    %-24.64q wakes in %-8v %s\n", s.Tenant, max(s.Until.Sub(now), 0).Round(time.Millisecond), s.Why)
	}
	if st.Sleeping > int64(len(sleepers)) {
		fmt.Fprintf(stdout, "    ... and %d more\n", st.Sleeping-int64(len(sleepers)))
	}
	return ExitOK
}

// envBool reads a boolean environment variable; unset or not a boolean
// is false.
func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

// Package enqueuecmd is the sluice producer CLI: one job from flags, many
// from JSON lines with a progress line, and a stats view. cmd/enqueue's
// main only calls Main. A JSON lines file is checked whole before any of
// it is enqueued, and the result is printed per line (see bulk), so that a
// script can send again exactly what was not accepted.
//
// Exit codes, for scripts:
//
//	0  every job accepted
//	1  Redis unreachable or another failure: nothing more is known
//	2  bad usage or an invalid job (nothing enqueued for it)
//	3  refused by the tenant's admission policy (rate limited)
//	4  refused because the queue or the tenant's backlog is full
//	5  refused because a job with the same id is waiting in the queue:
//	   nothing was enqueued, the job already there will run
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
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitRateLimited = 3
	ExitQueueFull   = 4
	ExitDuplicate   = 5
)

type options struct {
	redis                          redisconn.Flags
	policy                         string
	tenant, typ, payload, id, down string
	cost                           int64
	maxRetry                       int
	file                           string
	wait                           bool
	maxWait                        time.Duration
	quiet                          bool
}

func env(name string) string { return os.Getenv(name) }

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `usage:
  enqueue -policy policy.yaml -tenant T -type X [-payload JSON] [-downstream D] [-id ID] [-cost N]
  enqueue -policy policy.yaml -f jobs.jsonl     (or -f - for standard input; one JSON job per line:
          {"tenant":"t","type":"x","payload":{...},"downstream":"d","id":"...","cost":1})
  enqueue -policy policy.yaml stats

`)
	// Parse's own output goes nowhere (Main reports its errors itself), so
	// the flag list must be pointed at w here, or -h would list none.
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, `
exit codes: 0 accepted, 1 failure (e.g. Redis unreachable), 2 usage or invalid job,
            3 rate limited, 4 queue full, 5 a job with that id is already queued

-f reads and checks every line before it enqueues any: with a bad line it prints
file:line: reason for each on stderr, enqueues nothing and exits 2. Then it prints
one line per job to stdout, in file order:
  accepted <line> <id>
  refused <line> <reason>     reason: rate-limited, queue-full, duplicate, invalid, failed
and exits with the worst refusal's code (1 > 4 > 3 > 2 > 5), 0 if all were accepted.
To retry, send again only the lines refused as rate-limited, queue-full or failed,
and any line not listed (after an interrupt): a duplicate's job is queued already,
and an "id" catches a second sending only while its job still waits to start.
`)
}

// Main runs the CLI and returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.redis.URL, "redis", env("SLUICE_REDIS_URL"), "Redis URL, redis:// or rediss:// (env SLUICE_REDIS_URL)")
	fs.StringVar(&o.redis.Cluster, "redis-cluster", env("SLUICE_REDIS_CLUSTER"), "comma-separated Redis Cluster addresses (env SLUICE_REDIS_CLUSTER)")
	fs.StringVar(&o.redis.CAFile, "redis-ca", env("SLUICE_REDIS_CA"), "PEM file of the CAs to trust for rediss:// instead of the system's (env SLUICE_REDIS_CA)")
	fs.StringVar(&o.policy, "policy", env("SLUICE_POLICY"), "policy file: the queue and the tenants' admission policies (env SLUICE_POLICY)")
	fs.StringVar(&o.tenant, "tenant", "", "the job's tenant")
	fs.StringVar(&o.typ, "type", "", "the job's type (sluice.http for the built-in HTTP call)")
	fs.StringVar(&o.payload, "payload", "", "the job's payload (JSON for sluice.http jobs)")
	fs.StringVar(&o.id, "id", "", "the job's id (default: a random one)")
	fs.StringVar(&o.down, "downstream", "", "the downstream the job calls")
	fs.Int64Var(&o.cost, "cost", 0, "the job's cost in admission and quota units (default 1)")
	fs.IntVar(&o.maxRetry, "max-retry", 0, "retries on failure (default 25; -1 for none)")
	fs.StringVar(&o.file, "f", "", "read jobs as JSON lines from this file (- for standard input)")
	fs.BoolVar(&o.wait, "wait", false, "when refused, wait as the refusal says and try again (up to -max-wait)")
	fs.DurationVar(&o.maxWait, "max-wait", 5*time.Minute, "with -wait, the longest to keep trying one job")
	fs.BoolVar(&o.quiet, "q", false, "no progress line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return ExitOK
		}
		fmt.Fprintln(stderr, "enqueue:", err)
		usage(stderr, fs)
		return ExitUsage
	}
	stats := fs.NArg() == 1 && fs.Arg(0) == "stats"
	if fs.NArg() > 0 && !stats {
		fmt.Fprintf(stderr, "enqueue: unexpected arguments %q\n", fs.Args())
		return ExitUsage
	}
	if o.policy == "" {
		fmt.Fprintln(stderr, "enqueue: -policy is required (the queue's name, bounds and tenants' policies come from it)")
		return ExitUsage
	}
	if !o.redis.Configured() {
		fmt.Fprintln(stderr, "enqueue: no Redis configured: set -redis or SLUICE_REDIS_URL (or -redis-cluster)")
		return ExitUsage
	}
	if !stats && o.file == "" && (o.tenant == "" || o.typ == "") {
		fmt.Fprintln(stderr, "enqueue: give -tenant and -type for one job, -f for many, or stats")
		return ExitUsage
	}
	cfg, err := policy.Load(o.policy)
	if err != nil {
		fmt.Fprintln(stderr, "enqueue:", err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// go-redis would print a line per failed dial before our one error.
	redisconn.RouteDriverLog(slog.New(slog.NewTextHandler(stderr, nil)))
	client, err := o.redis.Client()
	if err != nil {
		fmt.Fprintln(stderr, "enqueue:", err)
		return ExitUsage
	}
	defer client.Close()
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		fmt.Fprintln(stderr, "enqueue:", err)
		return ExitUsage
	}
	if stats {
		return showStats(ctx, p, cfg, stdout, stderr)
	}
	if o.file != "" {
		in, name := stdin, "stdin"
		if o.file != "-" {
			f, err := os.Open(o.file)
			if err != nil {
				fmt.Fprintln(stderr, "enqueue:", err)
				return ExitUsage
			}
			defer f.Close()
			in, name = f, o.file
		}
		return bulk(ctx, p, o, name, in, stdout, stderr)
	}
	job := queue.Job{ID: o.id, Tenant: o.tenant, Type: o.typ, Payload: []byte(o.payload), Downstream: o.down, Cost: o.cost, MaxRetry: o.maxRetry}
	r, code := one(ctx, p, job, o, stderr)
	if code == ExitOK {
		fmt.Fprintf(stdout, "%s\n", r.ID)
	}
	return code
}

// one enqueues job, waiting and retrying as refusals say when -wait is
// set. It prints why a job was refused and returns the exit code.
func one(ctx context.Context, p *queue.Producer, job queue.Job, o options, stderr io.Writer) (queue.Receipt, int) {
	deadline := time.Now().Add(o.maxWait)
	for {
		r, err := p.Enqueue(ctx, job)
		if err == nil {
			return r, ExitOK
		}
		code, wait := classify(err)
		if code == ExitRateLimited || code == ExitQueueFull {
			if o.wait && time.Now().Add(wait).Before(deadline) {
				select {
				case <-time.After(wait):
					continue
				case <-ctx.Done():
					fmt.Fprintln(stderr, "enqueue: interrupted")
					return r, ExitFailure
				}
			}
			fmt.Fprintf(stderr, "enqueue: %v\n", err)
			if code == ExitQueueFull {
				fmt.Fprintf(stderr, "enqueue: back off and retry in %v\n", wait)
			}
			return r, code
		}
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		if code == ExitDuplicate {
			// Waiting would not help: the id is free only once a worker
			// has taken that job.
			fmt.Fprintf(stderr, "enqueue: not enqueued again; the job already queued will run (give another -id, or none for a random one)\n")
		}
		return r, code
	}
}

// classify maps an Enqueue error to an exit code and how long to wait
// before trying again.
func classify(err error) (int, time.Duration) {
	var rl *queue.RateLimitedError
	var qf *queue.QueueFullError
	switch {
	case errors.As(err, &rl):
		return ExitRateLimited, rl.Decision.RetryAfter
	case errors.As(err, &qf):
		return ExitQueueFull, time.Second
	case errors.Is(err, queue.ErrDuplicateJob):
		return ExitDuplicate, 0
	case errors.Is(err, queue.ErrInvalidJob):
		return ExitUsage, 0
	}
	return ExitFailure, 0
}

// bulk enqueues a JSON lines file, safe to run again after a partial
// failure. It reads and checks every line first (queue.ParseJob and the
// producer's own checks, the policy's among them); with any bad line it
// names each as name:line: reason on stderr, enqueues nothing and returns
// ExitUsage. Otherwise it enqueues the lines in order and prints one
// stdout line per job line: "accepted <line> <id>", or "refused <line>
// <reason>" with reason rate-limited, queue-full, duplicate (a job with
// that id is queued already), invalid or failed, and the error on stderr. The exit
// code is the worst refusal's (failure > queue full > rate limited >
// invalid > duplicate), 0 if all were accepted. A line that is not listed (after an
// interrupt) was not enqueued.
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
		fmt.Fprintf(stderr, "enqueue: %d bad lines in %s; nothing enqueued\n", bad, name)
		return ExitUsage
	}

	var done, accepted, refused int
	worst := ExitOK
	rank := map[int]int{ExitOK: 0, ExitDuplicate: 1, ExitUsage: 2, ExitRateLimited: 3, ExitQueueFull: 4, ExitFailure: 5}
	word := map[int]string{ExitDuplicate: "duplicate", ExitUsage: "invalid", ExitRateLimited: "rate-limited", ExitQueueFull: "queue-full", ExitFailure: "failed"}
	last := time.Now()
	progress := func(final bool) {
		if o.quiet || (!final && time.Since(last) < 200*time.Millisecond) {
			return
		}
		last = time.Now()
		end := "\r"
		if final {
			end = "\n"
		}
		fmt.Fprintf(stderr, "enqueue: %d of %d jobs, %d accepted, %d refused%s", done, len(jobs), accepted, refused, end)
	}
	for _, e := range jobs {
		r, code := one(ctx, p, e.job, o, prefixed{stderr, fmt.Sprintf("%s:%d: ", name, e.line)})
		done++
		if code == ExitOK {
			accepted++
			fmt.Fprintf(stdout, "accepted %d %s\n", e.line, r.ID)
		} else {
			refused++
			fmt.Fprintf(stdout, "refused %d %s\n", e.line, word[code])
			if rank[code] > rank[worst] {
				worst = code
			}
		}
		progress(false)
		if ctx.Err() != nil {
			break
		}
	}
	progress(true)
	return worst
}

// prefixed inserts a prefix after "enqueue: " in each message.
type prefixed struct {
	w      io.Writer
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	s := strings.Replace(string(b), "enqueue: ", "\nenqueue: "+p.prefix, 1)
	_, err := io.WriteString(p.w, s)
	return len(b), err
}

func showStats(ctx context.Context, p *queue.Producer, cfg *policy.Config, stdout, stderr io.Writer) int {
	st, err := p.Stats(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "enqueue: stats:", err)
		return ExitFailure
	}
	fmt.Fprintf(stdout, "queue %s\n", cfg.Queue.Name)
	fmt.Fprintf(stdout, "  depth        %d of %d (waiting to start: in the waiting room, or in asynq's pending list)\n", st.Depth, cfg.Queue.Bound)
	fmt.Fprintf(stdout, "  pending      %d in asynq's pending list (prefetch %d)\n", st.HandedOver, cfg.Queue.Prefetch)
	fmt.Fprintf(stdout, "  tenants      %d with jobs, %d asleep\n", st.Tenants, st.Sleeping)
	sleepers, err := p.Sleepers(ctx, maxSleepersShown)
	if err != nil {
		fmt.Fprintln(stderr, "enqueue: stats:", err)
		return ExitFailure
	}
	now := time.Now()
	for _, s := range sleepers {
		fmt.Fprintf(stdout, "    %-24.64q wakes in %-8v %s\n", s.Tenant, max(s.Until.Sub(now), 0).Round(time.Millisecond), s.Why)
	}
	if st.Sleeping > int64(len(sleepers)) {
		fmt.Fprintf(stdout, "    ... and %d more\n", st.Sleeping-int64(len(sleepers)))
	}
	return ExitOK
}

// maxSleepersShown is how many sleeping tenants stats lists.
const maxSleepersShown = 10

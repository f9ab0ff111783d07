// Command scale measures sluice where it is meant to be used: one
// downstream whose quota is per tenant (Shopify's bucket of 40 leaking
// 2 a second, per store), called on behalf of many tenants, against two
// peers in the same run:
//
//   - recipe: asynq with go-redis/redis_rate's Allow for the job's tenant
//     in the handler, as asynq's wiki recipe for rate limiting does (a
//     refusal is an error that IsFailure ignores, retried after its
//     RetryAfter);
//   - bare: asynq with no limiter at all, the machine's ceiling.
//
// For each case and system it flushes the Redis (a standalone redis-server,
// or a 3-master cluster), starts a fresh API in its own process (this
// binary again, "scale api": a leaky bucket per tenant, one for all calls,
// or none; 1-5 ms a call), enqueues the same jobs (sluice: sluice.http jobs
// with the built enqueue binary; the peers: asynq tasks), starts the
// workers (4 processes × 32 goroutines: the built cmd/worker, or this
// binary as "scale worker"), lets them warm up, and then measures for a
// while: delivered calls a second, 429s, Redis commands, scripts and CPU
// per delivered call (INFO deltas, every master summed), the workers' peak
// RSS, and each master's share of the commands on the cluster. It prints a
// markdown table and writes it to -out.
//
//	go run ./cmd/scale                                     # every case
//	go run ./cmd/scale -cases tenants100 -warmup 2s -measure 3s
//
// Everything listens on 127.0.0.1; every child process is killed on the
// way out (and, on Linux, dies with the benchmark even if it is killed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// scaleCase is one set-up of the benchmark.
type scaleCase struct {
	name    string
	what    string
	tenants int
	api     apiConfig // mode, rate and capacity; latency and life from the options
	conc    int       // each worker's goroutines; 0: the -conc flag
	cluster bool
	systems []string // the systems the case compares
}

// The quota of the cases: Shopify's REST Admin API, per store.
const (
	shopRate     = 2
	shopCapacity = 40
)

// perTenant is the API of the per-tenant cases.
func perTenant() apiConfig {
	return apiConfig{mode: modeTenant, rate: shopRate, capacity: shopCapacity}
}

// cases are the set-ups, in the order they run.
var cases = []scaleCase{
	{name: "tenants100", what: "100 tenants, API enforcing 2/s bucket 40 per tenant", tenants: 100, api: perTenant(), systems: []string{sysSluice, sysRecipe}},
	{name: "tenants1k", what: "1,000 tenants, per-tenant 2/s bucket 40", tenants: 1_000, api: perTenant(), systems: []string{sysSluice, sysRecipe}},
	{name: "tenants10k", what: "10,000 tenants, per-tenant 2/s bucket 40", tenants: 10_000, api: perTenant(), systems: []string{sysSluice, sysRecipe}},
	{name: "tenants100k", what: "100,000 tenants, per-tenant 2/s bucket 40", tenants: 100_000, api: perTenant(), systems: []string{sysSluice, sysRecipe}},
	{name: "nolimit10k", what: "10,000 tenants, no limit at the API", tenants: 10_000, api: apiConfig{mode: modeNone}, systems: []string{sysSluice, sysBare}},
	{name: "global5k", what: "one downstream at 5,000/s, 100 tenants", tenants: 100, api: apiConfig{mode: modeGlobal, rate: 5_000}, conc: 64, systems: []string{sysSluice, sysBare}},
	{name: "cluster10k", what: "3-master cluster, 10,000 tenants, per-tenant 2/s bucket 40", tenants: 10_000, api: perTenant(), cluster: true, systems: []string{sysSluice, sysRecipe}},
}

// options are the command's flags.
type options struct {
	cases        []scaleCase
	systems      []string // when set, only these systems run
	workers      int
	conc         int
	warmup       time.Duration
	measure      time.Duration
	maxJobs      int
	latencyMin   time.Duration
	latencyMax   time.Duration
	globalBurst  int64
	sluiceBurst  int64
	shards       int     // sluice's queue.shards on a cluster
	redisCPU     float64 // each redis-server's CPU cap, in CPUs; 0: none
	enqueueProcs int
	peerCheck    time.Duration
	out          string
	keep         bool
	verbose      bool
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == apiArg || os.Args[1] == workerArg) {
		sub := apiMain
		if os.Args[1] == workerArg {
			sub = workerMain
		}
		if err := sub(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "scale %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	caseList := fs.String("cases", strings.Join(names, ","), "cases to run, comma-separated")
	systems := fs.String("systems", "", "run only these systems of each case, comma-separated (sluice, recipe, bare); default each case's own")
	fs.IntVar(&o.workers, "workers", 4, "worker processes of each system")
	fs.IntVar(&o.conc, "conc", 32, "goroutines of each worker process (global5k: twice this)")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "from the workers' start to the start of the measurement")
	fs.DurationVar(&o.measure, "measure", 15*time.Second, "how long each system is measured")
	fs.IntVar(&o.maxJobs, "max-jobs", 200_000, "the most jobs enqueued for one system in one case (more than the machine can deliver in -warmup plus -measure)")
	fs.DurationVar(&o.latencyMin, "latency-min", time.Millisecond, "the least time the API takes to answer a call")
	fs.DurationVar(&o.latencyMax, "latency-max", 5*time.Millisecond, "the most time the API takes to answer a call")
	fs.Int64Var(&o.globalBurst, "global-burst", 100, "global5k: the capacity of the API's one bucket, and sluice's burst")
	fs.Int64Var(&o.sluiceBurst, "sluice-burst", shopCapacity, "the burst of sluice's per-tenant downstream (the API's bucket is 40)")
	fs.IntVar(&o.shards, "cluster-shards", 12, "sluice's queue.shards in the cluster cases (1 elsewhere)")
	fs.Float64Var(&o.redisCPU, "redis-cpu", 0, "cap each redis-server at this many CPUs (0.35: 35% of one), each in a cgroup of its own, as masters on hosts of their own would be; Linux, as root (0: no cap)")
	fs.DurationVar(&o.peerCheck, "peer-check", 0, "the peers' asynq DelayedTaskCheckInterval, how often due retries return to the queue (0: asynq's default, 5s)")
	fs.IntVar(&o.enqueueProcs, "enqueue-procs", 4, "enqueue processes run at once for sluice's jobs")
	fs.StringVar(&o.out, "out", "scale.md", "write the report here as well (empty: only standard output)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (binaries, policies, job files, logs)")
	fs.BoolVar(&o.verbose, "v", false, "say what each step does and how long it took (on standard error)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.workers < 1 || o.conc < 1 || o.warmup < 0 || o.measure <= 0 || o.maxJobs < 1 || o.enqueueProcs < 1 || o.peerCheck < 0 {
		return o, errors.New("-workers, -conc, -measure, -max-jobs and -enqueue-procs must be positive, -warmup and -peer-check not negative")
	}
	if o.redisCPU < 0 {
		return o, errors.New("-redis-cpu must not be negative")
	}
	if o.sluiceBurst < 1 || o.globalBurst < 1 {
		return o, errors.New("-sluice-burst and -global-burst must be at least 1")
	}
	if o.latencyMin < 0 || o.latencyMax < o.latencyMin {
		return o, errors.New("-latency-min must be at least 0 and at most -latency-max")
	}
	for s := range strings.SplitSeq(*systems, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case sysSluice, sysRecipe, sysBare:
			o.systems = append(o.systems, s)
		default:
			return o, fmt.Errorf("-systems: unknown system %q (sluice, recipe, bare)", s)
		}
	}
	want := map[string]bool{}
	for n := range strings.SplitSeq(*caseList, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(names, n) {
			return o, fmt.Errorf("-cases: unknown case %q (have %s)", n, strings.Join(names, ", "))
		}
		want[n] = true
	}
	for _, c := range cases {
		if !want[c.name] {
			continue
		}
		if c.api.mode == modeGlobal {
			c.api.capacity = o.globalBurst
		}
		if c.conc == 0 {
			c.conc = o.conc
		} else {
			c.conc = 2 * o.conc
		}
		if len(o.systems) > 0 {
			c.systems = o.systems
		}
		o.cases = append(o.cases, c)
	}
	if len(o.cases) == 0 {
		return o, errors.New("-cases: no case chosen")
	}
	return o, nil
}

// jobCount is how many jobs keep c's systems busy for the warm-up and the
// measurement: per tenant a bucket and the calls its rate lets through in
// that time, a tenth more; under no limit, or when that is more,
// -max-jobs.
func (o options) jobCount(c scaleCase) int {
	secs := (o.warmup + o.measure).Seconds()
	var n float64
	switch c.api.mode {
	case modeTenant:
		n = float64(c.tenants) * (float64(c.api.capacity) + float64(c.api.rate)*secs) * 1.1
	case modeGlobal:
		n = (float64(c.api.capacity) + float64(c.api.rate)*secs) * 1.1
	default:
		return o.maxJobs
	}
	return min(int(n)+100, o.maxJobs)
}

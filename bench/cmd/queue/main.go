// Command queue runs the whole-system queue benchmarks of docs/queue.md
// and docs/fairness.md against one redis-server on loopback and prints
// them as markdown:
//
//  1. enqueue throughput from concurrent producers: asynq's Client.Enqueue
//     beside sluice's Producer.Enqueue (tenant admission by a token bucket
//     that admits everything, and a bound above the job count);
//  2. processing throughput of no-op handlers in one process: an asynq
//     Server beside a sluice queue.Server (no throttle), each draining the
//     same number of pre-enqueued jobs;
//  3. fairness against FIFO with many active tenants: one big tenant's
//     backlog enqueued first and many small tenants, drained by sluice
//     (round-robin) and by asynq (FIFO): throughput and the small tenants'
//     waits, with everything queued up front (3a) and with the small
//     tenants' jobs arriving while the backlog drains (3b).
//
// It starts its own redis-server (a free 127.0.0.1 port, no persistence)
// and stops it at exit, unless -addr names a disposable server; the binary
// is $SLUICE_REDIS_SERVER when that is set, else redis-server on the PATH
// (see internal/redistest). Every phase runs once.
//
//	cd bench && go run ./cmd/queue
//	go run ./cmd/queue -jobs 5000 -fair-jobs 5000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/bench/internal/sysstat"
	"github.com/sluicehq/sluice/internal/redistest"
)

type options struct {
	addr         string
	rounds       int // of phases 1, 2 and 3a
	producers    int
	jobs         int // phase 1 and 2
	enqTenants   int
	procTenants  int
	payload      int
	concurrency  int
	poll         time.Duration
	retention    time.Duration
	fairJobs     int
	fairTenants  int
	bigShare     float64
	arrivalRate  float64
	phaseTimeout time.Duration
	timeout      time.Duration
	only         map[string]bool
	cpuprofile   string
	staged       bool
	quiet        bool
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "queue:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	var only string
	flag.StringVar(&o.addr, "addr", "", "use the Redis server at this address (it is FLUSHALLed: it must be disposable) instead of starting one")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds of phases 1, 2 and 3a: each system runs once per round, the two taking turns at going first; the median round's ratio is the result")
	flag.IntVar(&o.producers, "producers", 8, "concurrent producers (G)")
	flag.IntVar(&o.jobs, "jobs", 20_000, "jobs per system in the enqueue (1) and processing (2) phases")
	flag.IntVar(&o.enqTenants, "enqueue-tenants", 100, "tenants the enqueued jobs are spread over in phase 1, round-robin")
	flag.IntVar(&o.procTenants, "process-tenants", 1, "tenants the jobs of phase 2 are spread over")
	flag.IntVar(&o.payload, "payload", 64, "payload bytes per job (at least 8: the job's index)")
	flag.IntVar(&o.concurrency, "concurrency", 10, "worker concurrency (phases 2-4)")
	flag.DurationVar(&o.retention, "retention", 0, "sluice's Retention: how long asynq keeps completed tasks (0, the default, deletes them as bare asynq does)")
	flag.DurationVar(&o.poll, "poll", 10*time.Millisecond, "asynq's TaskCheckInterval for the bare server, sluice's PollInterval (which sluice also gives asynq)")
	flag.IntVar(&o.fairJobs, "fair-jobs", 20_000, "jobs per system in the fairness phase (3)")
	flag.IntVar(&o.fairTenants, "fair-tenants", 1000, "tenants in phase 3: one big, the rest small")
	flag.Float64Var(&o.bigShare, "big-share", 0.5, "the big tenant's share of phase 3's jobs, enqueued first")
	flag.Float64Var(&o.arrivalRate, "arrival-rate", 0, "phase 3b: small tenants' jobs per second arriving during the drain, the same for both systems; 0: half of each system's own rate in 3a")
	flag.DurationVar(&o.phaseTimeout, "phase-timeout", 60*time.Second, "longest a drain may take; a drain cut short is reported as such")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "longest the whole run may take")
	flag.StringVar(&only, "only", "", "comma-separated phases to run (enqueue,process,fair,arrivals); default all")
	flag.BoolVar(&o.staged, "staged", true, "phase 2 also runs `staged`, a minimal staging queue in front of asynq, in every round: the ceiling of any design that keeps jobs out of asynq until a worker has room")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write this process's CPU profile of the whole run to this file")
	flag.BoolVar(&o.quiet, "q", false, "no progress on stderr")
	flag.Parse()
	if o.payload < 8 {
		o.payload = 8
	}
	if o.fairTenants < 2 || o.bigShare <= 0 || o.bigShare >= 1 {
		return fmt.Errorf("-fair-tenants must be at least 2 and -big-share between 0 and 1")
	}
	if o.producers < 1 || o.jobs < 1 || o.fairJobs < o.fairTenants || o.concurrency < 1 || o.rounds < 1 {
		return fmt.Errorf("-rounds, -producers, -jobs and -concurrency must be positive, -fair-jobs at least -fair-tenants")
	}
	o.only = map[string]bool{}
	for _, p := range strings.Split(only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.only[p] = true
		}
	}
	// Phase 3b paces each system at half its own rate in 3a (or 2); alone
	// it would have no rate to go by, and a made-up one lets FIFO drain
	// its backlog before most arrivals, which measures another case.
	if o.want("arrivals") && !o.want("fair") && !o.want("process") && o.arrivalRate <= 0 {
		return fmt.Errorf("-only arrivals needs phase fair or process beside it (its arrival rates are half of each system's rate there), or -arrival-rate")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	addr := o.addr
	if addr == "" {
		srv, stopRedis, err := redistest.Launch(redistest.Config{})
		if err != nil {
			return err
		}
		defer func() {
			if err := stopRedis(); err != nil {
				fmt.Fprintln(os.Stderr, "queue:", err)
			}
		}()
		addr = srv.Addr()
	}
	b := &bench{addr: addr, o: o, base: time.Now()}
	b.admin = b.client(nil)
	defer b.admin.Close()
	in, err := redisinfo.Read(ctx, b.admin)
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	b.version = in.Version

	began := time.Now()
	r := &report{o: o}
	fmt.Printf("# sluice queue benchmarks\n\n")
	fmt.Printf("%s; %d CPUs, %s/%s, %s; redis-server %s on %s (persistence off); load average at the start %s.\n",
		began.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(),
		b.version, addr, loadAverage())
	fmt.Printf("Phases 1, 2 and 3a ran **%d rounds**: in each, each system ran once, the two taking turns at going first, because on a shared machine the load changes from second to second and one pair of runs can move a ratio by 0.2. Each phase gives every round's ratio and judges its target on the median; its tables show the median round. Phase 3b ran once. Every measurement starts on an empty server (FLUSHALL). \"server commands\" is INFO's `total_commands_processed`, which counts the commands run inside scripts; \"round trips\" are the commands the benchmark's clients sent (a script is one).\n\n", o.rounds)

	if o.want("enqueue") {
		if err := r.enqueue(ctx, b); err != nil {
			return err
		}
	}
	if o.want("process") {
		if err := r.process(ctx, b); err != nil {
			return err
		}
	}
	if o.want("fair") {
		if err := r.fair(ctx, b, false); err != nil {
			return err
		}
	}
	if o.want("arrivals") {
		if err := r.fair(ctx, b, true); err != nil {
			return err
		}
	}
	r.summary()
	fmt.Printf("\nTotal run time %.1fs.\n", time.Since(began).Seconds())
	return nil
}

func (o options) want(phase string) bool { return len(o.only) == 0 || o.only[phase] }

func (o options) logf(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}

// loadAverage is the 1-, 5- and 15-minute load averages, "unknown" where
// they cannot be read.
func loadAverage() string {
	avg, ok := sysstat.LoadAvg()
	if !ok {
		return "unknown"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", avg[0], avg[1], avg[2])
}

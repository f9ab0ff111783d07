// Command settle measures reserve-then-settle in the product path: the
// built worker and enqueue binaries running sluice.http jobs against an
// API, in its own process, that allows a number of tokens a minute and
// charges each call what it turns out to cost, as LLM APIs charge tokens.
//
// Two systems run at the same time, each with its own redis-server (on a
// free loopback port, internal/redistest), its own API process (this
// binary, re-executed) and its own worker processes, with the same
// parameters and the same sequence of real costs:
//
//   - estimate: the downstream has no cost_from: every call books its job's
//     units (the estimate) and nothing corrects it;
//   - settle: cost_from json:usage.total_tokens: each call's slot is
//     settled to the cost the API reports.
//
// The jobs (units -estimate each, over -tenants tenants) are enqueued with
// the built enqueue -f before the workers start; then -workers worker
// processes of -conc goroutines each run them for -duration.
//
// The API's rule (OpenAI's tokens-per-minute limit refills continuously;
// this is that as a GCRA over tokens): it keeps a TAT that each admitted
// call moves forward by its real cost × 60 s / -quota, charged when the
// call arrives; a call that arrives while the TAT is more than the
// tolerance (-api-burst tokens' worth) ahead of now is refused with 429,
// Retry-After (whole seconds until the TAT is back within the tolerance)
// and an error body without usage. A call admitted costs the estimate
// times 2^u, u uniform on [-3,-1] ∪ [1,3] (-off either: 2 to 8 times off
// either way, 2.3 times the estimate on average), on [-3,-1] (below) or
// on [1,3] (above); the API answers it after a latency uniform in
// [-latency-min, -latency-max] with usage.total_tokens (and
// X-Tokens-Used) holding that cost.
//
// It prints, per system, the tokens the API admitted in the -duration
// from its first call, as a share of what it could have admitted (quota ×
// duration + tolerance), the calls and the 429s in that span, and judges
// settle against the target (≥ 90% with ≤ 2 429s).
//
//	go run ./cmd/settle
//	go run ./cmd/settle -off below -estimate 4000
//	go run ./cmd/settle -timeline /tmp/tl   # CSV of the API's and sluice's bucket levels
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
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// apiArg is the hidden first argument that makes this binary the API.
const apiArg = "api"

// The systems.
const (
	sysEstimate = "estimate"
	sysSettle   = "settle"
)

// The target for settle.
const (
	targetShare = 0.90
	target429s  = 2
)

// Bounds on the steps of a run, so that it always ends by itself.
const (
	startLimit = 60 * time.Second
	stopGrace  = 15 * time.Second
	apiLife    = 30 * time.Minute
)

type options struct {
	quota, apiBurst, burst, estimate int64
	workers, conc, tenants, jobs     int
	latMin, latMax, duration         time.Duration
	seed                             uint64
	off                              string
	systems                          []string
	timeline                         string
	keep, verbose                    bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == apiArg {
		a, err := apiFromArgs(os.Args[2:])
		if err == nil {
			err = proc.Serve(a, apiLife)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "settle api:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "settle:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	met, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "settle:", err)
		os.Exit(1)
	}
	if !met {
		os.Exit(3)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("settle", flag.ContinueOnError)
	fs.Int64Var(&o.quota, "quota", 600_000, "the API's tokens a minute")
	fs.Int64Var(&o.apiBurst, "api-burst", 20_000, "the API's tolerance, in tokens")
	fs.Int64Var(&o.burst, "burst", 10_000, "the downstream's burst in the policy, in tokens (its rate is -quota a minute)")
	fs.Int64Var(&o.estimate, "estimate", 500, "each job's units: the estimate it books")
	fs.IntVar(&o.workers, "workers", 3, "worker processes of each system")
	fs.IntVar(&o.conc, "conc", 10, "goroutines of each worker process (-concurrency)")
	fs.IntVar(&o.tenants, "tenants", 4, "tenants the jobs are spread over")
	fs.IntVar(&o.jobs, "jobs", 0, "jobs enqueued per system; 0: enough for the run")
	fs.DurationVar(&o.latMin, "latency-min", 100*time.Millisecond, "the API's least answer time")
	fs.DurationVar(&o.latMax, "latency-max", 500*time.Millisecond, "the API's greatest answer time")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "the span measured, from each API's first call")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the real costs and latencies")
	fs.StringVar(&o.off, "off", "either", "how the real cost is off the estimate, 2 to 8 times: \"either\" way, \"below\" (an estimate such as max_tokens) or \"above\"")
	systems := fs.String("systems", "estimate,settle", "the systems to run, comma-separated")
	fs.StringVar(&o.timeline, "timeline", "", "a directory to write each system's time line to (CSV: the API's level, sluice's level, calls in flight)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (binaries, policy, job files, logs)")
	fs.BoolVar(&o.verbose, "v", false, "say what each step does (on standard error)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.off != "either" && o.off != "below" && o.off != "above" {
		return o, fmt.Errorf("-off must be either, below or above, got %q", o.off)
	}
	if o.quota < 1 || o.apiBurst < 1 || o.burst < 1 || o.estimate < 1 || o.workers < 1 || o.conc < 1 || o.tenants < 1 || o.jobs < 0 ||
		o.latMin < 0 || o.latMax < o.latMin || o.duration <= 0 {
		return o, errors.New("-quota, -api-burst, -burst, -estimate, -workers, -conc, -tenants and -duration must be positive, -jobs not negative, -latency-max at least -latency-min")
	}
	if o.estimate > o.burst {
		return o, fmt.Errorf("-estimate %d is above -burst %d: no job could ever start", o.estimate, o.burst)
	}
	for s := range strings.SplitSeq(*systems, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case sysEstimate, sysSettle:
			if !slices.Contains(o.systems, s) {
				o.systems = append(o.systems, s)
			}
		default:
			return o, fmt.Errorf("-systems: unknown system %q (estimate, settle)", s)
		}
	}
	if len(o.systems) == 0 {
		return o, errors.New("-systems: none chosen")
	}
	if o.jobs == 0 {
		o.jobs = o.autoJobs()
	}
	return o, nil
}

// autoJobs is enough jobs that no system runs out within the duration:
// half as many again as the quota holds at the cheaper of the estimate
// and the real cost's least average, plus a few seconds' refusals.
func (o options) autoJobs() int {
	f := map[string]float64{"either": 2.3, "below": 0.27, "above": 4.33}[o.off]
	per := min(float64(o.estimate), float64(o.estimate)*f)
	n := 1.5*float64(o.quota)*o.duration.Minutes()/per + float64(20*o.workers*o.conc)
	return int(n)
}

// ceiling is the most tokens the API could admit in the span measured.
func (o options) ceiling() float64 {
	return float64(o.quota)*o.duration.Minutes() + float64(o.apiBurst)
}

func (o options) apiArgs() []string {
	return []string{apiArg, "-quota", fmt.Sprint(o.quota), "-tolerance", fmt.Sprint(o.apiBurst), "-estimate", fmt.Sprint(o.estimate),
		"-off", o.off, "-seed", fmt.Sprint(o.seed), "-latency-min", o.latMin.String(), "-latency-max", o.latMax.String()}
}

func run(ctx context.Context, o options) (bool, error) {
	dir, err := os.MkdirTemp("", "sluice-settle-")
	if err != nil {
		return false, err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "settle: keeping", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	worker, enq, err := proc.BuildSluice(ctx, filepath.Join(dir, "bin"))
	if err != nil {
		return false, err
	}
	if o.timeline != "" {
		if err := os.MkdirAll(o.timeline, 0o755); err != nil {
			return false, err
		}
	}
	var kids proc.Group
	defer kids.KillAll()
	results := make([]summary, len(o.systems))
	errs := make([]error, len(o.systems))
	done := make(chan int, len(o.systems))
	for i, sys := range o.systems {
		s := &system{name: sys, o: o, dir: filepath.Join(dir, sys), self: self, worker: worker, enq: enq, kids: &kids}
		go func() {
			results[i], errs[i] = s.run(ctx)
			done <- i
		}()
	}
	for range o.systems {
		i := <-done
		if errs[i] != nil {
			kids.KillAll() // the other system stops with it
			return false, fmt.Errorf("%s: %w", o.systems[i], errs[i])
		}
	}
	fmt.Print(report(o, results))
	met := true
	for _, r := range results {
		if r.system == sysSettle {
			met = r.met(o)
		}
	}
	return met, nil
}

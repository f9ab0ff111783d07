// Command fleet runs sluice the way its users do and measures it against a
// floor measured in the same run: N built worker processes, a
// policy file, sluice.http jobs enqueued by the built enqueue binary, and
// an API in its own process that enforces a quota, answers 429 with
// Retry-After beyond it, and honours nothing else.
//
// For each case it
//
//   - starts the API (this binary again, as "fleet api": a sliding 1 s
//     window log, or a GCRA with a tolerance), which records every call;
//   - writes a policy file with one downstream "api" at the API's quota,
//     flushes its own redis-server, enqueues enough GET jobs over a few
//     tenants to keep the fleet busy for the whole case with
//     "enqueue -f jobs.jsonl", and resets Redis's command statistics;
//   - starts the workers, lets them run for the case's duration, reads
//     INFO commandstats, stops them with SIGTERM and reads the API's record;
//   - runs the floor against a fresh API of the same kind: one in-process
//     golang.org/x/time/rate.Limiter at the quota (burst 1) shared by
//     workers × concurrency goroutines that call the API over HTTP and
//     ignore Retry-After;
//
// and prints, per system, the share of the quota served in the steady
// state, the 429s, the longest silence, and Redis's script calls and
// commands per delivered job, then which of the targets are met.
//
//	go run ./cmd/fleet                                   # every case, ~5 minutes
//	go run ./cmd/fleet -cases window50 -duration-scale 0.25
//	go run ./cmd/fleet -cases window50 -plot fleet.png -busy 2
//
// It exits 0 when every judged target is met, 3 when one is missed, and 1
// when the run itself failed. Everything listens on 127.0.0.1; every child
// process is killed on the way out (and, on Linux, dies with the benchmark
// even if it is killed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// fleetCase is one set-up of the benchmark.
type fleetCase struct {
	name        string
	api         apiConfig
	workers     int // worker processes
	conc        int // each worker's -concurrency
	concurrency int // the downstream's concurrency cap in the policy (0: none)
	duration    time.Duration
}

// cases are the set-ups, in the order they run.
var cases = []fleetCase{
	{name: "window50", api: apiConfig{mode: "window", rate: 50}, workers: 2, conc: 8, duration: 40 * time.Second},
	{name: "gcra200", api: apiConfig{mode: "gcra", rate: 200, tol: 2}, workers: 4, conc: 8, duration: 25 * time.Second},
	{name: "gcra1000", api: apiConfig{mode: "gcra", rate: 1000, tol: 10}, workers: 4, conc: 8, duration: 25 * time.Second},
	{name: "conc4", api: apiConfig{mode: "window", rate: 20, latency: 50 * time.Millisecond}, workers: 2, conc: 8, concurrency: 4, duration: 30 * time.Second},
}

// commandsCase is the target judged on the gcra200 run's commandstats.
const commandsCase = "commands"

// options are the command's flags.
type options struct {
	cases    []fleetCase
	commands bool // judge the commands target (on gcra200)
	sluice   bool
	floor    bool
	scale    float64
	busy     int
	keep     bool
	verbose  bool
	plot     string
	tenants  int
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case apiArg:
			if err := apiMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "fleet api:", err)
				os.Exit(1)
			}
			return
		case busyArg:
			if err := busyMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "fleet busy:", err)
				os.Exit(1)
			}
			return
		}
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	met, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	if !met {
		os.Exit(3)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	names = append(names, commandsCase)
	caseList := fs.String("cases", strings.Join(names, ","), "cases to run, comma-separated ("+commandsCase+" judges the gcra200 run, which it runs)")
	systems := fs.String("systems", "sluice,floor", "systems to run in each case: sluice, floor or both")
	fs.Float64Var(&o.scale, "duration-scale", 1, "multiplies every case's duration (0.25 for a quick look)")
	fs.IntVar(&o.busy, "busy", 0, "CPU-burning loops to run in a child process while measuring, to mimic a busy machine")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (binaries, policy and job files, logs)")
	fs.BoolVar(&o.verbose, "v", false, "say what each step does and how long it took")
	fs.StringVar(&o.plot, "plot", "", "write a PNG of calls per 100 ms, sluice and the floor, in the window50 case")
	fs.IntVar(&o.tenants, "tenants", 4, "tenants the jobs are spread over")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.scale <= 0 || o.busy < 0 || o.tenants < 1 {
		return o, errors.New("-duration-scale and -tenants must be positive, -busy not negative")
	}
	want := map[string]bool{}
	for n := range strings.SplitSeq(*caseList, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(names, n) {
			return o, fmt.Errorf("-cases: unknown case %q (have %s)", n, strings.Join(names, ", "))
		}
		want[n] = true
	}
	o.commands = want[commandsCase]
	for _, c := range cases {
		if want[c.name] || (o.commands && c.name == "gcra200") {
			c.duration = time.Duration(float64(c.duration) * o.scale).Round(time.Millisecond)
			o.cases = append(o.cases, c)
		}
	}
	if len(o.cases) == 0 {
		return o, errors.New("-cases: no case chosen")
	}
	for s := range strings.SplitSeq(*systems, ",") {
		switch strings.TrimSpace(s) {
		case "sluice":
			o.sluice = true
		case "floor":
			o.floor = true
		case "":
		default:
			return o, fmt.Errorf("-systems: unknown system %q (sluice, floor)", s)
		}
	}
	if !o.sluice && !o.floor {
		return o, errors.New("-systems: no system chosen")
	}
	if o.plot != "" && !slices.ContainsFunc(o.cases, func(c fleetCase) bool { return c.name == "window50" }) {
		return o, errors.New("-plot draws the window50 case: add it to -cases")
	}
	return o, nil
}

// run runs the chosen cases and prints the report; it returns whether
// every judged target was met.
func run(ctx context.Context, o options) (bool, error) {
	e, err := newEnv(ctx, o)
	if err != nil {
		return false, err
	}
	defer e.close()

	fmt.Printf("# sluice fleet benchmark\n\n%s, %d CPUs, %s/%s, redis-server %s on %s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, e.redisVersion, e.redisAddr)
	if o.busy > 0 {
		fmt.Printf(", %d busy loops beside", o.busy)
	}
	fmt.Printf(".\nShare of the quota: 200s a second from %v after the first call to the end, over the quota. Longest silence: the longest spell without a 200 from the first call to the end. Redis: from CONFIG RESETSTAT (jobs enqueued, workers not yet started) to the end, per call answered 200.\n\n", steadyAfter)

	var results []caseResult
	for _, c := range o.cases {
		r := caseResult{c: c}
		if o.sluice {
			f, err := e.runSluice(ctx, c)
			if err != nil {
				return false, fmt.Errorf("%s, sluice: %w", c.name, err)
			}
			r.sluice = f
		}
		if o.floor {
			f, err := e.runFloor(ctx, c)
			if err != nil {
				return false, fmt.Errorf("%s, floor: %w", c.name, err)
			}
			r.floor = f
		}
		results = append(results, r)
	}
	ts := judge(results, o.commands)
	writeReport(os.Stdout, results, ts)
	if o.plot != "" {
		for _, r := range results {
			if r.c.name == "window50" {
				if err := writePlot(o.plot, r, e.arrivals[r.c.name]); err != nil {
					return false, fmt.Errorf("-plot: %w", err)
				}
				fmt.Printf("\nPlot: %s\n", o.plot)
			}
		}
	}
	if o.keep {
		fmt.Printf("\nFiles kept in %s\n", e.dir)
	}
	met := true
	for _, t := range ts {
		if t.judged && !t.met {
			met = false
		}
	}
	return met, nil
}

// Package workercmd is the worker command: the flags, the signals, the
// demo and the exit codes around queue/worker, which runs the worker
// itself. cmd/worker only calls Main.
package workercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/policycheck"
	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue/worker"
)

// notConfigured is the worker's error without a Redis: the enqueue CLI's,
// and the way to the embedded one.
var notConfigured = errors.New(redisconn.NotConfigured + `; "-redis embedded" runs an in-memory Redis without a password, whose jobs are lost when the worker exits (-demo uses one)`)

// options are the command's settings: the worker's and the demo's.
type options struct {
	worker    *worker.Config
	demo      bool
	demoFor   time.Duration
	demoQuota int64
	check     bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wf := worker.NewFlags(fs, os.Getenv)
	fs.BoolVar(&o.demo, "demo", false, "run the whole system in this process: embedded Redis, a fake downstream with a quota, producers and workers")
	fs.DurationVar(&o.demoFor, "demo-duration", 20*time.Second, "how long the demo runs (0: until interrupted)")
	fs.Int64Var(&o.demoQuota, "demo-quota", 50, "the demo downstream's quota, calls per second")
	fs.BoolVar(&o.check, "check", false, "check the -policy file and exit (0 valid, 2 not), printing every problem as file:line:column; no Redis needed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.worker, err = wf.Config(); err != nil {
		return o, err
	}
	if !o.demo && !o.check && o.worker.PolicyFile == "" {
		return o, errors.New("-policy is required (or -demo)")
	}
	return o, nil
}

// Main runs the worker until ctx is done or SIGINT/SIGTERM, and returns
// the process's exit code: 0 after a graceful stop, 2 for bad flags or a
// bad policy file, 1 when the worker cannot start or fails. SIGHUP
// reloads the policy file (worker.Worker.ReloadFile). With -check it
// only checks the policy file (policycheck.Run), without Redis.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 2
	}
	if o.check {
		return policycheck.Run(o.worker.PolicyFile, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	// go-redis would print a line per failed dial before our one error.
	redisconn.RouteDriverLog(log)
	if o.demo {
		return runDemo(ctx, o, stdout, stderr)
	}
	o.worker.Logger = log
	w, err := worker.New(o.worker)
	if errors.Is(err, worker.ErrNoRedis) {
		// The embedded Redis only when asked for: a worker that forgot
		// -redis would accept jobs and lose them on exit.
		err = notConfigured
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 2
	}
	// SIGHUP reloads the policy file: its limits apply without a
	// restart, or the file is refused with its problems logged and the
	// running policy stands (worker.ReloadFile).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloads := make(chan struct{})
	go func() {
		defer close(reloads)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.ReloadFile(ctx) // it logs what it did
			}
		}
	}()
	err = w.Run(ctx)
	stop()
	<-reloads
	if err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 1
	}
	return 0
}

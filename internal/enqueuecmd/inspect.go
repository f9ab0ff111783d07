package enqueuecmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// ExitNotFound is the exit code of why, cancel and delete for a job that
// sluice does not know (completed, deleted, or never enqueued), and of
// cancel and delete for a job that asynq holds now (ExitHandedOver).
const (
	ExitNotFound   = 7 // no such job (it completed, was deleted, or never was)
	ExitHandedOver = 8 // the job is asynq's now: asynq's tools apply
)

// inspectCommands are the subcommands that read or edit the waiting room.
var inspectCommands = map[string]bool{"why": true, "list": true, "cancel": true, "delete": true}

const inspectUsage = `usage:
  enqueue -policy policy.yaml why <id> -tenant T [-json]
          where the job is, why it waits and until when
  enqueue -policy policy.yaml list -tenant T [-delayed] [-cursor C] [-limit N] [-json]
          a page of the tenant's waiting jobs (or with -delayed its jobs for later);
          the last line gives the next page's cursor
  enqueue -policy policy.yaml cancel <id> -tenant T
          remove a job for later before it is due
  enqueue -policy policy.yaml delete <id> -tenant T
          remove a waiting job (or one for later)

exit codes: 0 done, 1 failure, 2 usage, 7 no such job (it completed, was deleted,
            or never was), 8 the job is asynq's now (use asynqmon or the asynq CLI)
`

// inspectMain runs a subcommand of inspectCommands; args start with its
// name. o holds the flags given before it, which the subcommand's own
// flags may also set.
func inspectMain(ctx context.Context, args []string, o options, stdout, stderr io.Writer) int {
	cmd := args[0]
	fs := flag.NewFlagSet("enqueue "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var tenant, cursor string
	var delayed, asJSON bool
	var limit int
	fs.StringVar(&tenant, "tenant", "", "the job's tenant")
	fs.BoolVar(&delayed, "delayed", false, "list: the jobs for later")
	fs.StringVar(&cursor, "cursor", "", "list: the cursor the page before gave")
	fs.IntVar(&limit, "limit", 100, "list: jobs a page (at most 1000)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	fs.StringVar(&o.policy, "policy", o.policy, "policy file")
	fs.StringVar(&o.redis.URL, "redis", o.redis.URL, "Redis URL")
	fs.StringVar(&o.redis.Cluster, "redis-cluster", o.redis.Cluster, "Redis Cluster addresses")
	fs.StringVar(&o.redis.CAFile, "redis-ca", o.redis.CAFile, "PEM file of CAs for rediss://")
	bad := func(problem any) int {
		fmt.Fprintf(stderr, "enqueue %s: %v\n\n%s", cmd, problem, inspectUsage)
		return ExitUsage
	}
	// Flags may come before and after the id.
	var pos []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, inspectUsage)
			return ExitOK
		} else if err != nil {
			return bad(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	id := ""
	switch {
	case cmd == "list" && len(pos) > 0:
		return bad(fmt.Sprintf("unexpected arguments %q", pos))
	case cmd != "list" && len(pos) != 1:
		return bad("give one job id")
	case cmd != "list":
		id = pos[0]
	}
	switch {
	case tenant == "":
		return bad("-tenant is required (a job id is unique within its tenant)")
	case o.policy == "":
		return bad("-policy is required (the queue's name and its downstreams come from it)")
	case !o.redis.Configured():
		return bad(redisconn.NotConfigured)
	}
	cfg, err := policy.Load(o.policy)
	if err != nil {
		return bad(err)
	}
	redisconn.RouteDriverLog(slog.New(slog.NewTextHandler(stderr, nil)))
	client, err := o.redis.Client()
	if err != nil {
		return bad(err)
	}
	defer client.Close()
	th, err := throttle.New(client, nil)
	if err != nil {
		return bad(err)
	}
	defer th.Close()
	qcfg := cfg.QueueConfig()
	in, err := queue.NewInspector(client, &queue.InspectorConfig{Queue: qcfg.Queue, Prefix: qcfg.Prefix, Shards: qcfg.Shards, Throttle: th,
		Downstreams: func(name string) (queue.Downstream, bool) { d, ok := cfg.Downstreams[name]; return d, ok }})
	if err != nil {
		return bad(err)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "enqueue %s: %v\n", cmd, err)
		switch {
		case errors.Is(err, queue.ErrJobNotFound):
			return ExitNotFound
		case errors.Is(err, queue.ErrHandedOver):
			return ExitHandedOver
		case errors.Is(err, queue.ErrInvalidJob), errors.Is(err, queue.ErrNotDelayed):
			return ExitUsage
		}
		return ExitFailure
	}
	switch cmd {
	case "why":
		info, err := in.Job(ctx, tenant, id)
		if err != nil {
			return fail(err)
		}
		if asJSON {
			return printJSON(stdout, info)
		}
		printWhy(stdout, info)
	case "list":
		pg, err := in.List(ctx, tenant, queue.ListOptions{Delayed: delayed, Cursor: cursor, Limit: limit})
		if err != nil {
			return fail(err)
		}
		if asJSON {
			return printJSON(stdout, pg)
		}
		for _, j := range pg.Jobs {
			if delayed {
				fmt.Fprintf(stdout, "%s\t%s\t%s\tdue %s\n", j.ID, j.Type, j.Downstream, j.Due.Format(time.RFC3339Nano))
			} else {
				fmt.Fprintf(stdout, "%d\t%s\t%s\t%s\tenqueued %s\n", j.Position, j.ID, j.Type, j.Downstream, j.EnqueuedAt.Format(time.RFC3339Nano))
			}
		}
		what := "waiting"
		if delayed {
			what = "for later"
		}
		fmt.Fprintf(stdout, "# %d of %d %s", len(pg.Jobs), pg.Total, what)
		if pg.Next != "" {
			fmt.Fprintf(stdout, "; next page: -cursor %s", pg.Next)
		}
		fmt.Fprintln(stdout)
	case "cancel", "delete":
		f := in.Delete
		if cmd == "cancel" {
			f = in.Cancel
		}
		if err := f(ctx, tenant, id); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s %s\n", map[string]string{"cancel": "cancelled", "delete": "deleted"}[cmd], id)
	}
	return ExitOK
}

func printJSON(w io.Writer, v any) int {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	if err := e.Encode(v); err != nil {
		return ExitFailure
	}
	return ExitOK
}

// printWhy prints a job's JobInfo for people: its state and why, then a
// line a reason, with how long each lasts.
func printWhy(w io.Writer, info queue.JobInfo) {
	fmt.Fprintf(w, "%s: %s\n", info.State, info.Why)
	for _, wt := range info.Waits {
		left := ""
		if !wt.Until.IsZero() {
			left = fmt.Sprintf(" (until %s, in %v)", wt.Until.Format(time.RFC3339Nano), wt.Until.Sub(info.Now).Round(time.Millisecond))
		}
		fmt.Fprintf(w, "  %-7s %s%s\n", wt.Kind, wt.Detail, left)
	}
	if !info.StartsAt.IsZero() {
		fmt.Fprintf(w, "  starts  at about %s (in %v)\n", info.StartsAt.Format(time.RFC3339Nano), info.StartsAt.Sub(info.Now).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  task    %s in asynq queue %s\n", info.TaskID, info.Queue)
}

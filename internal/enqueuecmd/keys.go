package enqueuecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

const keysUsage = `usage:
  enqueue keys add -tenant T [-tenant T2 ...]   a new API key for T (a key for several tenants:
                                                 each request names one); prints the key, once
  enqueue keys list                             every key: id, tenants, created, rotated
  enqueue keys revoke ID                        refused from the next request on
  enqueue keys rotate ID                        a new secret for the key; prints it, once;
                                                 the old one is refused from the next request on

The keys are the queue's (-policy names it) on its Redis; workers run with
-enqueue-keys to require them on POST /enqueue (Authorization: Bearer <key>).
Redis holds a SHA-256 of each key, not the key: a lost key is rotated, not read back.
To change a key without refusing a request, add a second one, move the callers, revoke the first.

`

// keys runs "enqueue keys VERB ...", with the Redis and policy flags
// given before "keys" (or their environment variables) as defaults.
func keys(ctx context.Context, rf redisconn.Flags, policyFile string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("enqueue keys", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&rf.URL, "redis", rf.URL, "Redis URL, redis:// or rediss:// (env SLUICE_REDIS_URL)")
	fs.StringVar(&rf.Cluster, "redis-cluster", rf.Cluster, "comma-separated Redis Cluster addresses (env SLUICE_REDIS_CLUSTER)")
	fs.StringVar(&rf.CAFile, "redis-ca", rf.CAFile, "PEM file of the CAs to trust for rediss:// (env SLUICE_REDIS_CA)")
	fs.StringVar(&policyFile, "policy", policyFile, "policy file: the queue whose keys these are (env SLUICE_POLICY)")
	var tenants []string
	fs.Func("tenant", "a tenant of the new key (add); repeat for a key of several tenants", func(s string) error {
		tenants = append(tenants, s)
		return nil
	})
	bad := func(problem any) int {
		fmt.Fprintln(stderr, "enqueue keys:", problem)
		fmt.Fprint(stderr, keysUsage)
		return ExitUsage
	}
	if len(args) == 0 {
		return bad("give add, list, revoke or rotate")
	}
	verb, rest := args[0], args[1:]
	if verb == "-h" || verb == "-help" || verb == "help" {
		fmt.Fprint(stdout, keysUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return ExitOK
	}
	// Flags before and after the id.
	var pos []string
	for {
		if err := fs.Parse(rest); err != nil {
			return bad(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	want := map[string]int{"add": 0, "list": 0, "revoke": 1, "rotate": 1}
	n, ok := want[verb]
	switch {
	case !ok:
		return bad(fmt.Sprintf("unknown command %q", verb))
	case len(pos) != n && n == 1:
		return bad(fmt.Sprintf("%s takes one key id (see enqueue keys list)", verb))
	case len(pos) != n:
		return bad(fmt.Sprintf("unexpected arguments %q", pos))
	case verb == "add" && len(tenants) == 0:
		return bad("add needs -tenant")
	case verb != "add" && len(tenants) > 0:
		return bad("-tenant is for add")
	case policyFile == "":
		return bad("-policy is required (the keys are its queue's)")
	case !rf.Configured():
		return bad(redisconn.NotConfigured)
	}
	cfg, err := policy.Load(policyFile)
	if err != nil {
		return bad(err)
	}
	redisconn.RouteDriverLog(slog.New(slog.NewTextHandler(stderr, nil)))
	client, err := rf.Client()
	if err != nil {
		return bad(err)
	}
	defer client.Close()
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		return bad(err)
	}
	ks := p.Keys()
	fail := func(err error) int {
		fmt.Fprintln(stderr, "enqueue keys:", err)
		if errors.Is(err, queue.ErrInvalidJob) {
			return ExitUsage
		}
		return ExitFailure
	}
	switch verb {
	case "add":
		ak, key, err := ks.Add(ctx, tenants...)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, key)
		fmt.Fprintf(stderr, "enqueue keys: key %s for %s in queue %q; it is shown this once: store it now\n", ak.ID, quoted(ak.Tenants), cfg.Queue.Name)
	case "list":
		list, err := ks.List(ctx)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%-16s  %-20s  %-20s  %s\n", "ID", "CREATED", "ROTATED", "TENANTS")
		for _, ak := range list {
			rotated := "-"
			if !ak.Rotated.IsZero() {
				rotated = ak.Rotated.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(stdout, "%-16s  %-20s  %-20s  %s\n", ak.ID, ak.Created.UTC().Format(time.RFC3339), rotated, quoted(ak.Tenants))
		}
	case "revoke":
		if err := ks.Revoke(ctx, pos[0]); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stderr, "enqueue keys: key %s revoked\n", pos[0])
	case "rotate":
		key, err := ks.Rotate(ctx, pos[0])
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, key)
		fmt.Fprintf(stderr, "enqueue keys: key %s has a new secret, shown this once: store it now; the old one is refused from now on\n", pos[0])
	}
	return ExitOK
}

// quoted lists tenants as Go strings, comma-separated: a tenant id may
// hold any character.
func quoted(tenants []string) string {
	q := make([]string, len(tenants))
	for i, t := range tenants {
		q[i] = strconv.Quote(t)
	}
	return strings.Join(q, ",")
}

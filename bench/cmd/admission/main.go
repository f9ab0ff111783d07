// Command admission runs the admission benchmarks of docs/algorithms.md
// and prints them as markdown: decisions per second and p50/p99 latency of each of
// sluice's five Redis algorithms beside go-redis/redis_rate at several
// concurrencies, the ratio of each to redis_rate, and the Redis memory each
// keeps per key (and per entry for the sliding log).
//
// It starts its own redis-server on a free loopback port (persistence off)
// and stops it at the end, unless -addr names a server to use instead. The
// binary is $SLUICE_REDIS_SERVER when that is set, else redis-server on
// the PATH (see internal/redistest).
//
//	cd bench && go run ./cmd/admission -duration 5s -rounds 10 -concurrency 1,8,64
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/admission"
	"github.com/sluicehq/sluice/internal/redistest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "admission:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		duration = flag.Duration("duration", 5*time.Second, "measured time of each target at each concurrency, split over the rounds")
		conc     = flag.String("concurrency", "1,8,64", "comma-separated numbers of concurrent callers")
		rounds   = flag.Int("rounds", 10, "slices each measurement is cut into; the targets take turns within each round")
		keys     = flag.Int("keys", admission.DefaultKeys, "number of distinct keys, one chosen at random per call")
		addr     = flag.String("addr", "", "use the Redis server at this address (it must be disposable: keys are written and stats reset) instead of starting one")
		machine  = flag.String("note", "", "a note on the machine, printed under the title (e.g. \"2 cores, shared\")")
		quiet    = flag.Bool("q", false, "do not print progress to stderr")
	)
	flag.Parse()
	cs, err := parseInts(*conc)
	if err != nil {
		return fmt.Errorf("-concurrency: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *addr == "" {
		srv, stopRedis, err := redistest.Launch(redistest.Config{})
		if err != nil {
			return err
		}
		defer func() {
			if err := stopRedis(); err != nil {
				fmt.Fprintln(os.Stderr, "admission:", err)
			}
		}()
		*addr = srv.Addr()
	}
	most := 1
	for _, c := range cs {
		most = max(most, c)
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: most + 4, MinIdleConns: most})
	defer client.Close()

	cfg := admission.Config{Duration: *duration, Concurrency: cs, Rounds: *rounds, Keys: *keys}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	rep, err := admission.RunSuite(ctx, client, cfg)
	if err != nil {
		return err
	}
	rep.Markdown(os.Stdout, *machine)
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

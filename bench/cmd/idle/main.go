// Command idle measures what an idle fleet costs Redis, and how soon it
// wakes for a job: it starts a redis-server of its own and -workers built
// worker processes on one policy (one downstream, no schedules), lets them
// settle, counts the commands Redis processed over -for (INFO:
// total_commands_processed, the commands scripts run included, and the
// busiest commands), then enqueues -jobs sluice.http jobs one at a time,
// each after an idle pause, and reports how long after its Enqueue
// was called each reached a loopback API.
//
//	go run ./cmd/idle
//	go run ./cmd/idle -workers 4 -for 10s
//
// Everything listens on 127.0.0.1; every child process is killed on the
// way out. docs/operations.md gives its figures.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

type options struct {
	workers, conc, jobs int
	window, settle      time.Duration
	pause               time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.workers, "workers", 1, "worker processes")
	flag.IntVar(&o.conc, "concurrency", 10, "each worker's -concurrency")
	flag.DurationVar(&o.window, "for", 10*time.Second, "how long the idle fleet's commands are counted")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "how long the fleet idles after starting before the count")
	flag.IntVar(&o.jobs, "jobs", 10, "jobs enqueued one at a time after the count, for the wake-up time")
	flag.DurationVar(&o.pause, "pause", 700*time.Millisecond, "idle time before each of those jobs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

const policyText = `queue:
  name: idle
  bound: 1000
downstreams:
  api:
    base_url: %s/
    rate: 1000
`

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "sluice-idle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	workerBin, _, err := proc.BuildSluice(ctx, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	srv, stopRedis, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return err
	}
	defer stopRedis()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()

	// The API: when each job's call arrived.
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	api := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived[r.URL.Path] = cmp.Or(arrived[r.URL.Path], time.Now())
		mu.Unlock()
	})}
	go api.Serve(ln)
	defer api.Close()
	base := "http://" + ln.Addr().String()
	polPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(polPath, fmt.Appendf(nil, policyText, base), 0o644); err != nil {
		return err
	}

	var kids proc.Group
	defer kids.KillAll()
	for i := range o.workers {
		w, err := proc.Start(fmt.Sprintf("worker %d", i+1), filepath.Join(dir, fmt.Sprintf("worker-%d.log", i+1)), workerBin,
			"-policy", polPath, "-redis", "redis://"+srv.Addr()+"/0", "-listen", "127.0.0.1:0", "-concurrency", strconv.Itoa(o.conc))
		if err != nil {
			return err
		}
		kids.Add(w)
		if _, err := w.WaitLine(ctx, "sluice worker started", time.Minute); err != nil {
			return err
		}
	}
	if err := proc.Sleep(ctx, o.settle); err != nil {
		return err
	}
	before, err := redisinfo.Read(ctx, rc)
	if err != nil {
		return err
	}
	if err := proc.Sleep(ctx, o.window); err != nil {
		return err
	}
	after, err := redisinfo.Read(ctx, rc)
	if err != nil {
		return err
	}
	d := after.Sub(before)
	secs := after.At.Sub(before.At).Seconds()
	fmt.Printf("idle fleet of %d worker(s), -concurrency %d, over %.1f s: %.1f commands/s (%.1f a worker), Redis CPU %.1f ms/s\n",
		o.workers, o.conc, secs, float64(d.Processed)/secs, float64(d.Processed)/secs/float64(o.workers), 1000*d.CPU/secs)
	names := make([]string, 0, len(d.Commands))
	for n := range d.Commands {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(d.Commands[b].Calls, d.Commands[a].Calls) })
	for _, n := range names[:min(len(names), 10)] {
		fmt.Printf("  %-22s %8.1f/s\n", n, float64(d.Commands[n].Calls)/secs)
	}

	// Wake-up: one job at a time on the idle fleet.
	pol, err := policy.Load(polPath)
	if err != nil {
		return err
	}
	qc := pol.QueueConfig()
	p, err := queue.NewProducer(rc, &qc)
	if err != nil {
		return err
	}
	var waits []time.Duration
	for n := range o.jobs {
		if err := proc.Sleep(ctx, o.pause); err != nil {
			return err
		}
		path := "/job/" + strconv.Itoa(n)
		payload := fmt.Sprintf(`{"method":"GET","url":%q}`, base+path)
		enqueued := time.Now() // the call may reach the API before Enqueue returns
		if _, err := p.Enqueue(ctx, queue.Job{Tenant: "t" + strconv.Itoa(n%3), Type: "sluice.http", Downstream: "api", Payload: []byte(payload)}); err != nil {
			return err
		}
		deadline := enqueued.Add(10 * time.Second)
		for {
			mu.Lock()
			at, ok := arrived[path]
			mu.Unlock()
			if ok {
				waits = append(waits, at.Sub(enqueued))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("job %d did not arrive within 10 s", n)
			}
			if err := proc.Sleep(ctx, time.Millisecond); err != nil {
				return err
			}
		}
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		fmt.Printf("wake-up, enqueue to the API, %d jobs %v apart: median %v, 90th %v, max %v\n", len(waits), o.pause,
			waits[len(waits)/2].Round(100*time.Microsecond), waits[len(waits)*9/10].Round(100*time.Microsecond), waits[len(waits)-1].Round(100*time.Microsecond))
	}
	return nil
}

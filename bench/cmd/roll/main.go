// Command roll measures a rolling change of a downstream's rate across a
// fleet of built workers: two workers at -from calls a second drain a
// backlog of sluice.http jobs against a loopback API that records every
// call; then, one at a time, each is replaced by a worker whose policy
// file says -to. It prints the most calls the API saw in any 1 s window
// before the first new worker started, and after it (from the moment its
// "sluice worker started" line appeared), and the workers' WARN lines
// about the disagreement.
//
//	go run ./cmd/roll
//	go run ./cmd/roll -from 10 -to 5 -phase 6s
//
// Everything listens on 127.0.0.1; every child process is killed on the
// way out.
package main

import (
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

func main() {
	from := flag.Int("from", 10, "the rate before, calls a second")
	to := flag.Int("to", 5, "the rate after")
	phase := flag.Duration("phase", 6*time.Second, "how long each step of the roll runs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *from, *to, *phase); err != nil {
		fmt.Fprintln(os.Stderr, "roll:", err)
		os.Exit(1)
	}
}

const policyText = "queue:\n  name: roll\n  bound: 100000\ndownstreams:\n  api:\n    base_url: %s/\n    rate: %d\n"

func run(ctx context.Context, from, to int, phase time.Duration) error {
	dir, err := os.MkdirTemp("", "sluice-roll-")
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

	var mu sync.Mutex
	var calls []time.Time
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	api := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
	})}
	go api.Serve(ln)
	defer api.Close()
	base := "http://" + ln.Addr().String()
	files := map[int]string{}
	for _, rate := range []int{from, to} {
		files[rate] = filepath.Join(dir, fmt.Sprintf("policy-%d.yaml", rate))
		if err := os.WriteFile(files[rate], fmt.Appendf(nil, policyText, base, rate), 0o644); err != nil {
			return err
		}
	}
	pol, err := policy.Load(files[from])
	if err != nil {
		return err
	}
	qc := pol.QueueConfig()
	p, err := queue.NewProducer(rc, &qc)
	if err != nil {
		return err
	}
	jobs := int(float64(from) * 6 * phase.Seconds())
	for n := range jobs {
		payload := fmt.Sprintf(`{"method":"GET","url":%q}`, base+"/j/"+strconv.Itoa(n))
		if _, err := p.Enqueue(ctx, queue.Job{Tenant: "t" + strconv.Itoa(n%6), Type: "sluice.http", Downstream: "api", Payload: []byte(payload)}); err != nil {
			return err
		}
	}

	var kids proc.Group
	defer kids.KillAll()
	n := 0
	start := func(rate int) (*proc.Child, time.Time, error) {
		n++
		w, err := proc.Start(fmt.Sprintf("worker %d (%d/s)", n, rate), filepath.Join(dir, fmt.Sprintf("worker-%d.log", n)), workerBin,
			"-policy", files[rate], "-redis", "redis://"+srv.Addr()+"/0", "-listen", "127.0.0.1:0", "-concurrency", "4")
		if err != nil {
			return nil, time.Time{}, err
		}
		kids.Add(w)
		if _, err := w.WaitLine(ctx, "sluice worker started", time.Minute); err != nil {
			return nil, time.Time{}, err
		}
		return w, time.Now(), nil
	}
	old1, _, err := start(from)
	if err != nil {
		return err
	}
	old2, _, err := start(from)
	if err != nil {
		return err
	}
	if err := proc.Sleep(ctx, phase); err != nil {
		return err
	}
	new1, first, err := start(to)
	if err != nil {
		return err
	}
	if err := proc.Sleep(ctx, phase/2); err != nil {
		return err
	}
	old1.Stop(10 * time.Second)
	if err := proc.Sleep(ctx, phase/2); err != nil {
		return err
	}
	new2, _, err := start(to)
	if err != nil {
		return err
	}
	old2.Stop(10 * time.Second)
	if err := proc.Sleep(ctx, phase); err != nil {
		return err
	}
	end := time.Now()
	new1.Stop(10 * time.Second)
	new2.Stop(10 * time.Second)

	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	slices.SortFunc(got, func(a, b time.Time) int { return a.Compare(b) })
	before, _ := maxWindow(got, first.Add(-phase+2*time.Second), first)
	after, at := maxWindow(got, first, end)
	fmt.Printf("rolling %d/s -> %d/s over 2 workers (each step %v), %d calls:\n", from, to, phase, len(got))
	fmt.Printf("  before the first new worker: at most %d calls in a 1 s window\n", before)
	fmt.Printf("  from its start on:           at most %d calls in a 1 s window (the window from +%v)\n", after, at.Sub(first).Round(time.Millisecond))
	for i := 0; i < int(end.Sub(first)/time.Second); i++ {
		c, _ := count(got, first.Add(time.Duration(i)*time.Second), first.Add(time.Duration(i+1)*time.Second))
		fmt.Printf("  second %2d after: %d\n", i+1, c)
	}
	warned := 0
	for i := 1; i <= n; i++ {
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("worker-%d.log", i)))
		warned += strings.Count(string(b), "run another policy")
	}
	fmt.Printf("  WARN lines about another policy: %d\n", warned)
	return nil
}

// maxWindow is the most calls in a 1 s window starting at or after from
// and ending by to, and where it starts.
func maxWindow(calls []time.Time, from, to time.Time) (int, time.Time) {
	best, at := 0, from
	for i, c := range calls {
		if c.Before(from) || c.Add(time.Second).After(to) {
			continue
		}
		n, _ := count(calls[i:], c, c.Add(time.Second))
		if n > best {
			best, at = n, c
		}
	}
	return best, at
}

// count is the calls in [from, to).
func count(calls []time.Time, from, to time.Time) (int, bool) {
	n := 0
	for _, c := range calls {
		if !c.Before(from) && c.Before(to) {
			n++
		}
	}
	return n, n > 0
}

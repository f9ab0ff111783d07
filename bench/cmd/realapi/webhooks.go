package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/vendorfake"
	"github.com/sluicehq/sluice/internal/redistest"
)

// hookJob is one webhook the case enqueued.
type hookJob struct {
	kind     string // healthy, slow, down
	accepted time.Time
}

// runWebhooks: a receiver per customer (its own loopback port, its own
// downstream, the customer its tenant), 18 healthy, 1 slow, 1 down, each
// sent -hook-rate webhooks a second for 20 s by the enqueue binary as
// the case goes; the docs' policy, one worker of the defaults. A
// webhook's enqueue-to-call time runs from the moment enqueue printed
// its "accepted" line to its first arrival at the receiver.
func runWebhooks(ctx context.Context, c *caseEnv) ([]row, error) {
	const (
		span  = 20 * time.Second
		drain = 30 * time.Second
		tick  = 250 * time.Millisecond
	)
	fake, ctl, err := c.fake(ctx, "hooks", "-healthy", "18", "-slow", "1", "-down", "1", "-slow-latency", "5s")
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	var eps []vendorfake.Endpoint
	if err := getJSON(ctx, ctl+"/endpoints", &eps); err != nil {
		return nil, err
	}
	var p strings.Builder
	p.WriteString("queue:\n  name: hooks\n  bound: 100000\ndownstreams:\n")
	for _, e := range eps {
		// The docs' webhook policy, a downstream per customer's host.
		fmt.Fprintf(&p, "  hook-%s:\n    base_url: %s/\n    rate: 10\n    burst: 5\n    per_tenant: true\n    timeout: 10s\n", e.Name, e.URL)
	}
	policy, err := c.policy("policy.yaml", p.String())
	if err != nil {
		return nil, err
	}
	ws, err := c.workers(ctx, policy, 1, 0)
	if err != nil {
		return nil, err
	}

	jobs := map[int]*hookJob{}
	var notes []string
	seq, batch := 0, 0
	sent := make([]int, len(eps))
	start := time.Now()
	for time.Since(start) < span {
		var lines []string
		var seqs []int
		due := time.Since(start).Seconds() * c.o.hookRate
		for i, e := range eps {
			for ; float64(sent[i]) < due; sent[i]++ {
				seq++
				jobs[seq] = &hookJob{kind: e.Kind}
				seqs = append(seqs, seq)
				lines = append(lines, httpJob(fmt.Sprintf("w-%d", seq), e.Name, "hook-"+e.Name, "POST", fmt.Sprintf("%s/hook/%d", e.URL, seq), `{"event":"order.paid"}`))
			}
		}
		if len(lines) > 0 {
			batch++
			refused, err := c.enqueueLive(ctx, policy, batch, lines, func(line int, at time.Time) { jobs[seqs[line-1]].accepted = at })
			if err != nil {
				return nil, err
			}
			if refused > 0 {
				notes = append(notes, fmt.Sprintf("batch %d: enqueue refused %d jobs", batch, refused))
			}
		}
		if err := proc.Sleep(ctx, tick); err != nil {
			return nil, err
		}
	}
	c.logf("enqueued %d webhooks in %d batches", seq, batch)

	// Let the healthy ones finish, up to drain.
	first := map[int]time.Time{}
	read := func() error {
		arr, err := arrivals(ctx, ctl)
		for _, a := range arr {
			n, perr := strconv.Atoi(strings.TrimPrefix(a.Path, "/hook/"))
			if _, seen := first[n]; perr == nil && !seen {
				first[n] = time.UnixMicro(a.At)
			}
		}
		return err
	}
	_ = waitFor(ctx, drain, func() (bool, error) {
		if err := read(); err != nil {
			return false, err
		}
		for n, j := range jobs {
			if _, ok := first[n]; j.kind == "healthy" && !j.accepted.IsZero() && !ok {
				return false, nil
			}
		}
		return true, nil
	})
	drained := time.Since(start)
	notes = append(notes, stopWorkers(ws)...)
	if err := read(); err != nil {
		return nil, err
	}
	var lat []time.Duration
	var healthy, slow, slowCalled int
	for n, j := range jobs {
		if j.accepted.IsZero() {
			continue
		}
		at, called := first[n]
		switch j.kind {
		case "healthy":
			healthy++
			if called {
				lat = append(lat, at.Sub(j.accepted))
			}
		case "slow":
			slow++
			if called {
				slowCalled++
			}
		}
	}
	p50, p99, worst := pacestat.Quantile(lat, 0.5), pacestat.Quantile(lat, 0.99), pacestat.Quantile(lat, 1)
	fig := fmt.Sprintf("the 18: %d of %d called, p50 %v, p99 %v, max %v; the slow one: %d of %d called in %v",
		len(lat), healthy, p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), slowCalled, slow, drained.Round(time.Second))
	return []row{{name: c.name, target: "every webhook called; enqueue-to-call p99 ≤ 250 ms for the 18", figure: fig,
		met: healthy > 0 && len(lat) == healthy && p99 <= 250*time.Millisecond, notes: notes}}, nil
}

// enqueueLive writes lines to a file, runs the enqueue binary on it, and
// calls accepted with each accepted line's number (from 1) and the
// moment its "accepted" line was read; it returns how many were refused.
func (c *caseEnv) enqueueLive(ctx context.Context, policy string, batch int, lines []string, accepted func(line int, at time.Time)) (int, error) {
	f := filepath.Join(c.dir, fmt.Sprintf("batch-%d.jsonl", batch))
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, c.enq, "-policy", policy, "-redis", c.redisURL, "-q", "-f", f)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := redistest.StartProcess(cmd); err != nil {
		return 0, err
	}
	refused := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		at := time.Now()
		fields := strings.Fields(sc.Text()) // "accepted <line> <id>" or "refused <line> <why>"
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.Atoi(fields[1])
		switch {
		case err != nil || n < 1 || n > len(lines):
		case fields[0] == "accepted":
			accepted(n, at)
		default:
			refused++
		}
	}
	if err := cmd.Wait(); err != nil && refused == 0 {
		return 0, fmt.Errorf("enqueue -f %s: %w: %s", filepath.Base(f), err, stderr.String())
	}
	return refused, nil
}

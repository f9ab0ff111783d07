package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/pacestat"
)

// report runs the phases and prints their tables.
type report struct {
	o        options
	enq      []enqResult
	proc     []drainResult
	procCost []counts
	fairs    [2][]drainResult // 3a, 3b
	targets  [][]string
}

// table prints a markdown table with padded columns.
func table(header []string, rows [][]string) {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	line := func(cells []string, right func(int) bool) {
		var sb strings.Builder
		sb.WriteString("|")
		for i, c := range cells {
			pad := strings.Repeat(" ", w[i]-len([]rune(c)))
			if right(i) {
				sb.WriteString(" " + pad + c + " |")
			} else {
				sb.WriteString(" " + c + pad + " |")
			}
		}
		fmt.Println(sb.String())
	}
	line(header, func(int) bool { return false })
	var sb strings.Builder
	sb.WriteString("|")
	for i := range header {
		if i == 0 {
			sb.WriteString(" " + strings.Repeat("-", w[i]) + " |")
		} else {
			sb.WriteString(" " + strings.Repeat("-", w[i]-1) + ": |")
		}
	}
	fmt.Println(sb.String())
	for _, r := range rows {
		line(r, func(i int) bool { return i > 0 })
	}
	fmt.Println()
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
func us(d time.Duration) string {
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
}
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func (r *report) target(what, measured string, ok bool) {
	r.targets = append(r.targets, []string{what, measured, met(ok)})
}

// ---- 1. enqueue ----

func (r *report) enqueue(ctx context.Context, b *bench) error {
	o := r.o
	tenantOf := func(i int) string { return fmt.Sprintf("tenant-%d", i%o.enqTenants) }
	run := func(which string) (enqResult, error) {
		c := newCounter()
		pc := b.client(c)
		defer pc.Close()
		var sys system
		switch which {
		case "asynq":
			sys = newBare(pc, pc, o.concurrency, o.poll)
		case "asynq+rate":
			sys = newAdmitted(pc, pc, o.concurrency, o.poll)
		default:
			s, err := newSluice(pc, pc, int64(10*o.jobs), &hugeBucket, o.concurrency, o.poll, o.retention)
			if err != nil {
				return enqResult{}, err
			}
			sys = s
		}
		o.logf("1. enqueue: %s, %d jobs from %d producers", which, o.jobs, o.producers)
		res, err := b.runEnqueue(ctx, sys, c, o.jobs, o.producers, tenantOf)
		if err != nil {
			return enqResult{}, err
		}
		o.logf("   %.0f jobs/s", res.rate())
		return res, nil
	}
	pair, ratio, ratios, others, err := rounds(o, run, enqResult.rate, "asynq+rate")
	if err != nil {
		return err
	}
	r.enq = pair
	fmt.Printf("## 1. Enqueue throughput\n\n")
	fmt.Printf("G = %d concurrent producers, %d no-op jobs per system, %d-byte payload. asynq: `asynq.NewClientFromRedisClient(c).EnqueueContext(ctx, asynq.NewTask(\"noop\", payload))`. sluice: `queue.Producer.Enqueue` with every tenant admitted by `%s` (a token bucket that runs in full and never refuses), jobs spread over %d tenants round-robin, Bound %d (above the job count), ids chosen by the Producer.\n\n",
		o.producers, o.jobs, o.payload, hugeBucket, o.enqTenants, 10*o.jobs)
	var rows [][]string
	for _, e := range r.enq {
		rt, cmds, rcpu, ccpu := e.cost.perJob(e.jobs)
		rows = append(rows, []string{e.sys, fmt.Sprint(e.jobs), f2(e.elapsed.Seconds()), f0(e.rate()), us(e.p50), us(e.p99),
			f2(rt), f2(cmds), f1(rcpu), f1(ccpu)})
	}
	table([]string{"system", "jobs", "seconds", "jobs/s", "p50 µs", "p99 µs", "round trips/job", "server commands/job", "redis-server CPU µs/job", "client CPU µs/job"}, rows)
	fmt.Printf("**sluice / asynq = %.2f** (target ≥ 0.7).\n\n", ratio)
	fmt.Print(roundsLine(ratios, ratio))
	if ar := others["asynq+rate"]; len(ar) > 0 {
		s, per := besideRounds(ar, ratios)
		fmt.Printf("`asynq+rate` is what an asynq user writes for per-tenant admission without sluice: `redis_rate.Limiter.Allow` (GCRA, %v per %v, burst %d) for the job's tenant, then the same `EnqueueContext`; two round trips and no bound. Its rounds ran beside the two above; its row in the table is from the round the table shows. **asynq+rate / asynq, median of %d rounds: %.2f** (in order: %s). sluice / asynq+rate, per round: median **%.2f**.\n\n",
			hugeRate.Rate, hugeRate.Period, hugeRate.Burst, len(ar), median(ar), s, per)
	}
	r.target("1. enqueue jobs/s, sluice / asynq ≥ 0.7", f2(ratio), ratio >= 0.7)
	return nil
}

// ---- 2. processing ----

func (r *report) process(ctx context.Context, b *bench) error {
	o := r.o
	tenantOf := func(i int) string { return fmt.Sprintf("tenant-%d", i%o.procTenants) }
	spec := drainSpec{n: o.jobs, tenantOf: tenantOf, groups: [][2]int{{0, o.jobs}}}
	var extra []string
	if o.staged {
		extra = []string{"staged"}
	}
	pair, ratio, ratios, others, err := rounds(o, func(which string) (drainResult, error) {
		o.logf("2. process: %s, %d pre-enqueued jobs, concurrency %d", which, o.jobs, o.concurrency)
		return r.drain(ctx, b, which, int64(10*o.jobs), spec)
	}, drainResult.rate, extra...)
	if err != nil {
		return err
	}
	r.proc = pair
	fmt.Printf("## 2. Processing throughput\n\n")
	fmt.Printf("%d no-op jobs pre-enqueued (%d tenant(s)), drained by one worker process with Concurrency %d; measured from the worker's start until the last job's handler started. asynq: `asynq.NewServerFromRedisClient`, TaskCheckInterval %v. sluice: `queue.Server`, no throttle, PollInterval %v (sluice also gives it to asynq as TaskCheckInterval), default Prefetch (3 × Concurrency), Retention %s. Commands per job include the workers' idle polling and asynq's background loops during the run.\n\n",
		o.jobs, o.procTenants, o.concurrency, o.poll, o.poll, retentionText(o.retention))
	var rows [][]string
	for _, d := range r.proc {
		rt, cmds, rcpu, ccpu := d.cost.perJob(d.done)
		rows = append(rows, []string{d.sys, fmt.Sprint(d.done) + timedOut(d), f2(d.elapsed.Seconds()), f0(d.rate()),
			f2(rt), f2(cmds), f1(rcpu), f1(ccpu)})
	}
	table([]string{"system", "jobs", "seconds", "jobs/s", "round trips/job", "server commands/job", "redis-server CPU µs/job", "client CPU µs/job"}, rows)
	fmt.Printf("**sluice / asynq = %.2f** (target ≥ 0.9).\n\n", ratio)
	fmt.Print(roundsLine(ratios, ratio))
	r.target("2. processing jobs/s, sluice / asynq ≥ 0.9", f2(ratio), ratio >= 0.9 && !r.proc[1].timedOut)
	if st := others["staged"]; len(st) > 0 {
		s, per := besideRounds(st, ratios)
		fmt.Printf("`staged` is the least a queue that keeps jobs out of asynq until a worker has room can do (round-robin across tenants and a throttle checked before dequeue both need that): jobs wait in one Redis list as ready-made asynq tasks, and a feeder in the worker process tops asynq's pending list up to %d with batches of at most %d, woken as sluice's dispatcher is, with no tenants, no JSON, no depth, ids or count-out. Its rounds ran beside the two above. **staged / asynq, median of %d rounds: %.2f** (in order: %s): the ceiling of any such design on this machine. sluice / staged, per round: median %.2f.\n\n",
			3*o.concurrency, stageBatch, len(st), median(st), s, per)
	}

	fmt.Printf("The workers' round trips per completed job, by script or command (the clients' view; avg is the round-trip time seen by the caller):\n\n")
	seen := map[string]bool{}
	var labels []string
	for _, d := range []drainResult{r.proc[1], r.proc[0]} {
		for _, l := range d.cost.client.labels() {
			if !seen[l] {
				seen[l] = true
				labels = append(labels, l)
			}
		}
	}
	// Labels under 1 call per 1,000 jobs in both systems (asynq's
	// background loops, connection set-up, the first EVALSHA of each
	// script answered NOSCRIPT) are summed into one row.
	rows = nil
	var other [2]labelStat
	for _, l := range labels {
		row := []string{l}
		minor := true
		for k, d := range []drainResult{r.proc[0], r.proc[1]} {
			s, ok := d.cost.client.stats[l]
			if ok && d.done > 0 && float64(s.calls)/float64(d.done) >= 0.001 {
				minor = false
			}
			other[k].calls += s.calls
			other[k].wait += s.wait
		}
		if minor {
			continue
		}
		for k, d := range []drainResult{r.proc[0], r.proc[1]} {
			s, ok := d.cost.client.stats[l]
			other[k].calls -= s.calls
			other[k].wait -= s.wait
			if !ok || d.done == 0 {
				row = append(row, "", "")
				continue
			}
			row = append(row, fmt.Sprintf("%.3f", float64(s.calls)/float64(d.done)), us(s.wait/time.Duration(s.calls)))
		}
		rows = append(rows, row)
	}
	row := []string{"other (background loops, connection set-up, NOSCRIPT)"}
	for k, d := range []drainResult{r.proc[0], r.proc[1]} {
		if other[k].calls == 0 || d.done == 0 {
			row = append(row, "", "")
			continue
		}
		row = append(row, fmt.Sprintf("%.3f", float64(other[k].calls)/float64(d.done)), us(other[k].wait/time.Duration(other[k].calls)))
	}
	rows = append(rows, row)
	table([]string{"script or command", "asynq calls/job", "asynq avg µs", "sluice calls/job", "sluice avg µs"}, rows)
	for _, d := range r.proc {
		empty := d.cost.client.stats["asynq dequeue → empty (worker loop sleeps)"].calls
		// asynq's processor sleeps TaskCheckInterval/2 + rand[0, TaskCheckInterval) after an empty dequeue.
		asleep := time.Duration(empty) * o.poll
		fmt.Printf("- %s: asynq's processor found its queue empty %d times; its single dequeue loop then sleeps %v on average (TaskCheckInterval/2 + up to TaskCheckInterval), about %.1fs of the %.1fs drain in all.\n",
			d.sys, empty, o.poll, asleep.Seconds(), d.elapsed.Seconds())
	}
	fmt.Println()
	cpuSplit(r.proc)
	return nil
}

// cpuSplit prints where each system's CPU went per job: redis-server's
// time inside scripts and the rest of it, and this process's user and
// system time and context switches. Both systems' workers run in this
// process, one at a time, so its usage over a drain is the worker's (and
// the Go runtime's: scheduler, GC).
func cpuSplit(runs []drainResult) {
	fmt.Printf("Where the CPU went, per job (redis-server: INFO's used_cpu and commandstats' time in EVAL/EVALSHA, which includes the commands the scripts ran; client: getrusage of this process):\n\n")
	var rows [][]string
	for _, d := range runs {
		if d.done == 0 {
			continue
		}
		n := float64(d.done)
		srv := d.cost.server
		scripts := float64(srv.Commands["evalsha"].Usec + srv.Commands["eval"].Usec + srv.Commands["evalsha_ro"].Usec + srv.Commands["eval_ro"].Usec)
		u := d.cost.usage
		rows = append(rows, []string{d.sys, f1(srv.CPU * 1e6 / n), f1(scripts / n), f1((srv.CPU*1e6 - scripts) / n),
			f1(float64(u.User.Microseconds()) / n), f1(float64(u.System.Microseconds()) / n),
			f2(float64(u.Switches) / n), f2(float64(u.Preempted) / n)})
	}
	table([]string{"system", "redis-server µs", "in scripts µs", "the rest µs", "client user µs", "client system µs", "client waits (voluntary switches)", "client preempted"}, rows)
	fmt.Printf("\"The rest\" of redis-server's time is reading requests, writing replies and its event loop, which every round trip costs, and the few commands sent outside scripts. A client thread that finds nothing to run waits in the kernel (a voluntary switch) and is woken when a reply arrives: system time that grows with how often the worker's goroutines all wait on Redis at once.\n\n")
}

func timedOut(d drainResult) string {
	if d.timedOut {
		return fmt.Sprintf(" of %d (timed out)", d.n)
	}
	return ""
}

// drain runs spec on a new system of kind which (see newSystem), counting
// its worker's commands, and logs the rate.
func (r *report) drain(ctx context.Context, b *bench, which string, bound int64, spec drainSpec) (drainResult, error) {
	c := newCounter()
	pc, wc := b.client(nil), b.client(c)
	defer pc.Close()
	defer wc.Close()
	sys, err := r.newSystem(which, pc, wc, bound)
	if err != nil {
		return drainResult{}, err
	}
	res, err := b.runDrain(ctx, sys, c, spec)
	if err != nil {
		return drainResult{}, err
	}
	r.o.logf("   %.0f jobs/s%s", res.rate(), timedOut(res))
	return res, nil
}

// newSystem returns asynq or sluice with producers on pc and the worker on
// wc; sluice's tenants have no admission policy.
func (r *report) newSystem(which string, pc, wc redis.UniversalClient, bound int64) (system, error) {
	switch which {
	case "asynq":
		return newBare(pc, wc, r.o.concurrency, r.o.poll), nil
	case "staged":
		return newStaged(pc, wc, r.o.concurrency, r.o.poll), nil
	}
	return newSluice(pc, wc, bound, nil, r.o.concurrency, r.o.poll, r.o.retention)
}

// ---- 3. fairness ----

func (r *report) fair(ctx context.Context, b *bench, arrivals bool) error {
	o := r.o
	n := o.fairJobs
	big := int(float64(n) * o.bigShare)
	small := o.fairTenants - 1
	tenantOf := func(i int) string {
		if i < big {
			return "big"
		}
		return fmt.Sprintf("small-%04d", 1+(i-big)%small)
	}
	k := 0
	if arrivals {
		k = 1
	}
	// rateFor is the arrival rate of 3b for a system: -arrival-rate, or
	// half the system's own rate in 3a (so that both are loaded alike),
	// or half its rate in phase 2 (main refuses to run 3b without one of
	// them).
	rateFor := func(which string) (float64, error) {
		if o.arrivalRate > 0 {
			return o.arrivalRate, nil
		}
		for _, set := range [][]drainResult{r.fairs[0], r.proc} {
			for _, d := range set {
				if d.sys == which && d.done > 0 {
					return 0.5 * d.rate(), nil
				}
			}
		}
		return 0, fmt.Errorf("phase 3b: no rate of %s from phase 3a or 2 to pace its arrivals by", which)
	}
	rates := map[string]float64{}
	run := func(which string) (drainResult, error) {
		spec := drainSpec{n: n, tenantOf: tenantOf, groups: [][2]int{{0, big}, {big, n}}}
		if arrivals {
			rate, err := rateFor(which)
			if err != nil {
				return drainResult{}, err
			}
			rates[which] = rate
			spec.groups = [][2]int{{0, big}}
			spec.arrive = [2]int{big, n}
			spec.rate = rates[which]
		}
		o.logf("3%c. fairness: %s, %d jobs, %d tenants%s", 'a'+k, which, n, o.fairTenants, map[bool]string{true: fmt.Sprintf(", arrivals at %.0f/s", spec.rate), false: ""}[arrivals])
		return r.drain(ctx, b, which, int64(10*n), spec)
	}
	ro := o
	if arrivals {
		ro.rounds = 1 // paced by the arrival rates: one round
	}
	pair, ratio, ratios, _, err := rounds(ro, run, drainResult.rate)
	if err != nil {
		return err
	}
	r.fairs[k] = pair

	if !arrivals {
		fmt.Printf("## 3. Fairness against FIFO, %d tenants\n\n", o.fairTenants)
		fmt.Printf("%d no-op jobs: tenant `big` has %d, enqueued first; then %d small tenants have %d–%d each, enqueued round-robin across them (small-0001's first job, small-0002's first job, …). asynq gets the same jobs in the same order, as plain tasks in one FIFO queue. Worker as in phase 2 (Concurrency %d, poll %v; sluice with weight 1 per tenant).\n\n",
			n, big, small, (n-big)/small, (n-big+small-1)/small, o.concurrency, o.poll)
		fmt.Printf("### 3a. Everything queued before the worker starts (%d active tenants)\n\n", o.fairTenants)
		fmt.Printf("Every job is queued when the drain starts, so waits are measured from the worker's start (start − drain start; the time spent enqueueing before it is the benchmark's set-up, the same for every job).\n\n")
	} else {
		fmt.Printf("### 3b. Small tenants arrive while the big backlog drains\n\n")
		how := "half of each system's own rate in 3a, so that both are loaded alike; the arrivals' own enqueues take a share of the same two cores, so this leaves some headroom. Throughput here is close to the arrival rate by design and is not a target"
		if o.arrivalRate > 0 {
			how = "set by -arrival-rate, the same for both"
		}
		fmt.Printf("`big`'s %d jobs are queued when the worker starts; the %d small tenants' %d jobs then arrive, in the same order as in 3a, at a steady rate (%s). Waits are enqueue call → handler start. Server commands include the arrivals' enqueues.\n\n",
			big, small, n-big, how)
	}
	var rows [][]string
	for _, d := range r.fairs[k] {
		w := fairWaits(d, big, tenantOf, arrivals)
		_, cmds, _, _ := d.cost.perJob(d.done)
		row := []string{d.sys}
		if arrivals {
			row = append(row, f0(rates[d.sys]))
		}
		rows = append(rows, append(row, fmt.Sprint(d.done)+timedOut(d), f2(d.elapsed.Seconds()), f0(d.rate()), f1(cmds),
			ms(w.smallP50), ms(w.smallP99), ms(w.smallMax), ms(w.firstP50), ms(w.firstP99), f2(w.posP50), f2(w.posP99), ms(w.bigLast)))
	}
	from := "from drain start"
	if arrivals {
		from = "from enqueue"
	}
	header := []string{"system"}
	if arrivals {
		header = append(header, "arrivals/s")
	}
	table(append(header, "jobs", "seconds", "jobs/s", "server commands/job",
		"small jobs p50 ms", "small p99 ms", "small max ms",
		"small tenants' 1st job p50 ms", "1st job p99 ms", "small p50 position", "small p99 position", "big's last job ms"), rows)
	fmt.Printf("Waits (ms, %s) until the handler started; the small columns cover the %d small tenants' %d jobs, \"1st job\" each small tenant's first job to start. \"position\" is the fraction of all jobs started before a small tenant's job (p50 and p99 over the small jobs), which does not depend on the system's speed: FIFO runs every small job after `big`'s backlog (position ≥ %.2f in 3a); round-robin interleaves them.\n\n", from, small, n-big, float64(big)/float64(n))
	wa := fairWaits(r.fairs[k][0], big, tenantOf, arrivals)
	ws := fairWaits(r.fairs[k][1], big, tenantOf, arrivals)
	target := " (target ≥ 0.8)"
	if arrivals {
		target = " (set by the arrival rates, not a target here)"
	}
	fmt.Printf("**sluice / FIFO throughput = %.2f**%s. Small tenants' p50 wait: sluice %s ms, FIFO %s ms (%.1f× lower); p99: sluice %s ms, FIFO %s ms (%.1f× lower).\n\n",
		ratio, target, ms(ws.smallP50), ms(wa.smallP50), ratioOf(wa.smallP50, ws.smallP50), ms(ws.smallP99), ms(wa.smallP99), ratioOf(wa.smallP99, ws.smallP99))
	fmt.Print(roundsLine(ratios, ratio))
	name := "3a. backlog"
	if arrivals {
		name = "3b. arrivals"
	}
	if !arrivals {
		r.target(name+": throughput, sluice / FIFO ≥ 0.8", f2(ratio), ratio >= 0.8 && !r.fairs[k][1].timedOut)
	}
	r.target(name+": small tenants' p50 / p99 wait, FIFO ÷ sluice (far lower)",
		fmt.Sprintf("%.1f× / %.1f×", ratioOf(wa.smallP50, ws.smallP50), ratioOf(wa.smallP99, ws.smallP99)),
		ws.smallP50 < wa.smallP50 && ws.smallP99 < wa.smallP99)
	if !arrivals {
		r.targets = append(r.targets, []string{"3a. backlog: small tenants' p50 / p99 position (not a target; independent of speed)",
			fmt.Sprintf("sluice %.2f / %.2f, FIFO %.2f / %.2f", ws.posP50, ws.posP99, wa.posP50, wa.posP99), "—"})
	}
	return nil
}

func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

type waits struct {
	smallP50, smallP99, smallMax, firstP50, firstP99, bigP50, bigLast time.Duration
	posP50, posP99                                                    float64
}

// fairWaits computes the waits of a fairness drain; jobs that never
// started are left out.
func fairWaits(d drainResult, big int, tenantOf func(int) string, fromEnqueue bool) waits {
	var smallW, bigW []time.Duration
	first := map[string]time.Duration{}  // tenant -> earliest start
	firstE := map[string]time.Duration{} // tenant -> earliest enqueue
	var w waits
	for i := 0; i < d.n; i++ {
		if d.start[i] == 0 {
			continue
		}
		from := d.drainStart
		if fromEnqueue && d.enq[i] > from {
			from = d.enq[i]
		}
		wait := d.start[i] - from
		if i < big {
			bigW = append(bigW, wait)
			w.bigLast = max(w.bigLast, d.start[i]-d.drainStart)
			continue
		}
		smallW = append(smallW, wait)
		t := tenantOf(i)
		if s, ok := first[t]; !ok || d.start[i] < s {
			first[t] = d.start[i]
		}
		if e, ok := firstE[t]; !ok || from < e {
			firstE[t] = from
		}
	}
	var firstW []time.Duration
	for t, s := range first {
		firstW = append(firstW, s-firstE[t])
	}
	w.smallP50, w.smallP99 = pacestat.Quantile(smallW, 0.5), pacestat.Quantile(smallW, 0.99)
	if len(smallW) > 0 {
		w.smallMax = smallW[len(smallW)-1]
	}
	w.firstP50, w.firstP99 = pacestat.Quantile(firstW, 0.5), pacestat.Quantile(firstW, 0.99)
	w.bigP50 = pacestat.Quantile(bigW, 0.5)

	// Positions: the rank of each small job's start among all starts.
	order := make([]int, 0, d.n)
	for i := 0; i < d.n; i++ {
		if d.start[i] != 0 {
			order = append(order, i)
		}
	}
	sort.Slice(order, func(a, b int) bool { return d.start[order[a]] < d.start[order[b]] })
	var pos []time.Duration // ranks, in the type pacestat.Quantile sorts
	for rank, i := range order {
		if i >= big {
			pos = append(pos, time.Duration(rank))
		}
	}
	if len(order) > 0 {
		w.posP50 = float64(pacestat.Quantile(pos, 0.5)) / float64(d.n)
		w.posP99 = float64(pacestat.Quantile(pos, 0.99)) / float64(d.n)
	}
	return w
}

// ---- summary ----

func (r *report) summary() {
	if len(r.targets) == 0 {
		return
	}
	fmt.Printf("## Targets\n\n")
	table([]string{"target", "measured", "met"}, r.targets)
}

// retentionText describes sluice's Retention setting.
func retentionText(d time.Duration) string {
	if d == 0 {
		return "0 (completed tasks deleted, as bare asynq does)"
	}
	return d.String() + " (completed tasks kept, unlike bare asynq)"
}

// ---- rounds ----

// rounds runs a phase o.rounds times: in each round run(which) once for
// asynq, once for sluice and once for each of extra, in an order that
// turns from round to round so that each system goes first in turn. It
// returns the results (asynq's, sluice's, then extra's) of the round whose
// ratio sluice / asynq of rate is the median (the lower of the two middle
// ones for an even count), the median, every round's ratio in round order,
// and every round's ratio extra / asynq for each of extra.
func rounds[T any](o options, run func(which string) (T, error), rate func(T) float64, extra ...string) ([]T, float64, []float64, map[string][]float64, error) {
	systems := append([]string{"asynq", "sluice"}, extra...)
	var sets [][]T
	var ratios []float64
	others := map[string][]float64{}
	for k := 0; k < o.rounds; k++ {
		got := map[string]T{}
		for j := range systems {
			which := systems[(j+k)%len(systems)]
			res, err := run(which)
			if err != nil {
				return nil, 0, nil, nil, err
			}
			got[which] = res
		}
		set := make([]T, len(systems))
		for j, which := range systems {
			set[j] = got[which]
		}
		sets = append(sets, set)
		base := rate(got["asynq"])
		ratios = append(ratios, rate(got["sluice"])/base)
		for _, which := range extra {
			others[which] = append(others[which], rate(got[which])/base)
		}
	}
	idx := make([]int, len(ratios))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ratios[idx[a]] < ratios[idx[b]] })
	mid := idx[(len(idx)-1)/2]
	return sets[mid], ratios[mid], ratios, others, nil
}

// besideRounds describes a system run beside the two in every round, from
// its ratios to asynq's (other) and sluice's (ratios): the former in
// order, and the median over the rounds of sluice's rate over its own.
func besideRounds(other, ratios []float64) (inOrder string, sluiceOverIt float64) {
	s := make([]string, len(other))
	per := make([]float64, len(other))
	for i, v := range other {
		s[i] = f2(v)
		per[i] = ratios[i] / v
	}
	return strings.Join(s, ", "), median(per)
}

// median returns the median of v (the lower middle one for an even count).
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

// roundsLine says what the rounds measured.
func roundsLine(ratios []float64, median float64) string {
	if len(ratios) == 1 {
		return ""
	}
	s := make([]string, len(ratios))
	lo, hi := ratios[0], ratios[0]
	for i, v := range ratios {
		s[i] = f2(v)
		lo, hi = min(lo, v), max(hi, v)
	}
	which := "median"
	if len(ratios)%2 == 0 {
		which = "median (the lower middle one)"
	}
	return fmt.Sprintf("Ratios of the %d rounds, in order: %s; %s **%.2f**, range %.2f to %.2f. The table shows that round.\n\n",
		len(ratios), strings.Join(s, ", "), which, median, lo, hi)
}

package e2e

// The fault tests of issue 6: sluice run as its users run it (worker and
// enqueue processes, a real redis-server, a fake downstream that enforces
// its quota) while Redis restarts or disappears, workers are killed or
// stopped, a Redis Cluster master restarts, and the downstream answers 429,
// 503 or nothing. docs/reliability.md says what each shows and the figures
// measured.
//
// Each test is bounded: every wait polls with a deadline. The default run
// checks that jobs whose next run is up to asynq (its retry backoff of
// 15-45 s, or the 30 s lease of a killed worker plus its recoverer's
// minute) are held by asynq in a state it will run; -sluice.long (or
// SLUICE_E2E_LONG=1) runs more jobs and faults and waits for every job to
// reach the downstream.

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
)

// The downstream of most tests: 25 calls a second, refusing a call more
// than 3 intervals (120ms) early (see TestEndToEnd for why 3).
const (
	quota     = 25
	tolerance = 3
)

// persistent is the redis-server configuration that loses no accepted job,
// even to SIGKILL.
var persistent = redistest.Config{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}}

// policyFor is the policy file of a test: queue e2e, downstream api at
// rate per second with max_wait 2s, plus the downstream fields in extra
// (indented by four spaces) and a tenant "limited" admitted 3 times an
// hour.
func policyFor(a *api, rate int, extra string) string {
	return fmt.Sprintf(`queue:
  name: %s
  bound: 20000
  prefetch: 16
downstreams:
  api:
    base_url: %s/api/
    rate: %d
    per: 1s
    max_wait: 2s
%stenants:
  limited:
    algorithm: fixed_window
    limit: 3
    period: 1h
`, queueName, a.URL(), rate, extra)
}

var tenants4 = []string{"t0", "t1", "t2", "t3"}

// checkDelivery logs how the jobs were delivered: missing and places are
// what settle returned (the jobs not delivered then, all held in Redis
// for a later run). Unless allowHeld, a job not delivered fails t. It
// returns the duplicates (see api.delivery).
func checkDelivery(t *testing.T, a *api, ids, missing []string, places map[string]int, allowHeld bool) (dup2xx, resent int) {
	t.Helper()
	_, dup2xx, resent = a.delivery(ids)
	t.Logf("%d of %d accepted jobs reached the downstream; duplicates: %d jobs answered 2xx twice, %d calls re-sent after one the downstream may have acted on; not yet delivered: %d %v",
		len(ids)-len(missing), len(ids), dup2xx, resent, len(missing), places)
	if len(missing) > 0 && !allowHeld {
		t.Errorf("%d jobs not delivered: %v", len(missing), places)
	}
	return dup2xx, resent
}

// logRedisOutage logs what the workers' logs say of the outage: the
// dispatcher's failed claims (it backs off and claims again) and the jobs
// whose asynq task could not be updated (asynq syncs them later).
func logRedisOutage(t *testing.T, f *fleet) {
	t.Helper()
	t.Logf("worker logs: %d failed claims retried; %d asynq task updates deferred (\"Will retry syncing\")",
		f.logged("sluice: dispatcher"), f.logged("Will retry syncing"))
}

// logRefusals logs when the downstream answered 429 or 503, relative to
// the events given.
func logRefusals(t *testing.T, a *api, events map[string]time.Time) {
	t.Helper()
	for _, c := range a.snapshot() {
		if c.status == http.StatusTooManyRequests || c.status == http.StatusServiceUnavailable {
			var rel []string
			for name, at := range events {
				rel = append(rel, fmt.Sprintf("%v after %s", c.at.Sub(at).Round(time.Millisecond), name))
			}
			slices.Sort(rel)
			t.Logf("job %s got %d: %s", c.id, c.status, strings.Join(rel, ", "))
		}
	}
}

// TestRedisKilledAndRestarted: a redis-server with appendonly yes and
// appendfsync always is killed with SIGKILL while three workers drain a
// backlog, and restarted on the same port. While it is down the CLI exits
// 1 saying why, POST /enqueue answers 503 and /healthz 503. After the
// restart the workers resume by themselves; every accepted job reaches the
// downstream at least once; the downstream never answers 429 and never
// sees more than its quota in a second. The long form accepts 10,000 jobs
// at a quota of 100 a second (tolerance 5 intervals, 50ms: at 200 a
// second and 20ms, stalls of a loaded 2-core machine alone drew 429s).
func TestRedisKilledAndRestarted(t *testing.T) {
	srv := redistest.Start(t, persistent)
	q, tol := pick(quota, 100), pick(tolerance, 5)
	a := newAPI(t, downstreamtest.Config{Rate: q, Tolerance: tol})
	f := newFleet(t, policyFor(a, q, ""), "-redis", "redis://"+srv.Addr()+"/0")
	workers := []*workerProc{f.start(), f.start(), f.start()}
	rdb := srv.Client(t)

	n := pick(200, 10_000)
	ids := f.enqueueJobs(a.jobs("k", n, tenants4))
	poll(t, time.Duration(n/q+60)*time.Second, func() bool { return a.delivered(ids) >= n/3 },
		func() string { return fmt.Sprintf("%d of %d delivered before the kill", a.delivered(ids), n) })

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()

	// Producers get clear errors: the CLI exits 1 naming the cause, the
	// endpoint answers 503 "unavailable".
	r := f.enqueue("", "-tenant", "t0", "-type", "sluice.http", "-downstream", "api", "-payload", `{"url":"`+a.URL()+`/api/jobs/refused"}`)
	t.Logf("enqueue with Redis down: exit %d after %v: %s", r.code, r.took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("enqueue with Redis down: exit %d, %q; want exit 1 saying connection refused", r.code, r.stderr)
	}
	code, body, err := post(workers[0].addr, a.jobLine("refused-http", "t0"))
	if err != nil || code != http.StatusServiceUnavailable || body.Reason != "unavailable" {
		t.Errorf("POST /enqueue with Redis down: %d %+v %v; want 503 unavailable", code, body, err)
	}
	poll(t, 10*time.Second, func() bool {
		for _, w := range workers {
			if w.healthy() {
				return false
			}
		}
		return true
	}, func() string { return "a worker's /healthz still answers 200 with Redis down" })

	srv.Restart(t)
	up := time.Now()
	t.Logf("Redis down for %v (killed, restarted on %s)", up.Sub(down).Round(time.Millisecond), srv.Addr())

	// The workers resume by themselves.
	var resumed time.Duration
	poll(t, 30*time.Second, func() bool {
		at, ok := a.firstCallAfter(up)
		resumed = at.Sub(up)
		return ok
	}, func() string { return "no call reached the downstream after Redis came back" })
	healthyIn := poll(t, 30*time.Second, func() bool {
		for _, w := range workers {
			if !w.healthy() {
				return false
			}
		}
		return true
	}, func() string { return "a worker's /healthz does not answer 200 after Redis came back" })
	t.Logf("first downstream call %v after the restart; every /healthz 200 within %v", resumed.Round(time.Millisecond), healthyIn.Round(time.Millisecond))

	// The producers too: 20 more jobs over HTTP are accepted.
	for i := range 20 {
		id := fmt.Sprintf("kh%02d", i)
		code, body, err := post(workers[i%3].addr, a.jobLine(id, tenants4[i%4]))
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("POST /enqueue after the restart: %d %+v %v", code, body, err)
		}
		ids = append(ids, id)
	}

	missing, places := settle(t, a, rdb, ids, tenants4, pick(90*time.Second, 9*time.Minute))
	checkDelivery(t, a, ids, missing, places, true)
	logRedisOutage(t, f)
	checkQuota(t, a, q, tol)
	logRefusals(t, a, map[string]time.Time{"down": down, "up": up})
}

// TestRedisUnreachable: Redis is stopped for several seconds and restarted
// on the same port while three workers drain a backlog. The throttle fails
// closed: the only calls the downstream sees during the outage are those
// whose slot was booked before it (at most max_wait ahead), so none arrives
// later than max_wait after Redis went away. Nothing accepted is lost and
// the fleet resumes by itself.
func TestRedisUnreachable(t *testing.T) {
	srv := redistest.Start(t, persistent)
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance})
	const maxWait = time.Second
	f := newFleet(t, strings.Replace(policyFor(a, quota, ""), "max_wait: 2s", "max_wait: 1s", 1), "-redis", "redis://"+srv.Addr()+"/0")
	workers := []*workerProc{f.start(), f.start(), f.start()}
	rdb := srv.Client(t)

	n := pick(200, 500)
	ids := f.enqueueJobs(a.jobs("u", n, tenants4))
	poll(t, time.Duration(n/quota+60)*time.Second, func() bool { return a.delivered(ids) >= n/4 },
		func() string { return fmt.Sprintf("%d of %d delivered before the outage", a.delivered(ids), n) })

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	// The outage lasts this long; meanwhile the workers report it.
	outage := pick(6*time.Second, 10*time.Second)
	unhealthy := 0
	for time.Since(down) < outage {
		for _, w := range workers {
			if !w.healthy() {
				unhealthy++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if unhealthy == 0 {
		t.Errorf("no /healthz answered anything but 200 during the outage")
	}
	restarting := time.Now()
	srv.Restart(t)
	up := time.Now()

	// Fail closed: while Redis is down, only the slots booked before it
	// went are used. Each of a worker's -concurrency 4 jobs holds at most
	// one such slot, so the outage sees at most workers × 4 calls,
	// however late a busy machine wakes them (failing open, it would see
	// the quota's 25 a second).
	during := a.callsBetween(down, restarting)
	var last time.Duration
	if len(during) > 0 {
		last = during[len(during)-1].at.Sub(down)
	}
	t.Logf("Redis stopped for %v; %d calls reached the downstream meanwhile (slots booked before), the last %v after it went (max_wait %v)",
		restarting.Sub(down).Round(time.Millisecond), len(during), last.Round(time.Millisecond), maxWait)
	if bound := 4 * len(workers); len(during) > bound {
		t.Errorf("%d calls reached the downstream while Redis was down; at most %d slots (one per running job) were booked before: the throttle did not fail closed", len(during), bound)
	}

	var resumed time.Duration
	poll(t, 30*time.Second, func() bool {
		at, ok := a.firstCallAfter(up)
		resumed = at.Sub(up)
		return ok
	}, func() string { return "no call reached the downstream after Redis came back" })
	t.Logf("first downstream call %v after the restart", resumed.Round(time.Millisecond))

	missing, places := settle(t, a, rdb, ids, tenants4, pick(90*time.Second, 9*time.Minute))
	checkDelivery(t, a, ids, missing, places, true)
	logRedisOutage(t, f)
	checkQuota(t, a, quota, tolerance)
	logRefusals(t, a, map[string]time.Time{"down": down, "up": up})
}

// TestWorkerKilled: while two workers run, the third is killed with
// SIGKILL after every slice of deliveries (every few seconds) and a new
// one started. The downstream caps concurrency at 6 calls (fake
// MaxConcurrent 6; policy concurrency 6 with 2s leases), as many as the
// three workers run (-concurrency 2 each): a killed worker's leases must
// run out for its replacement to get slots, or the jobs would stall after
// a few kills. The downstream never refuses a call, for its quota or its
// concurrency. Jobs the killed workers were running come back through
// asynq's lease recovery: the default run checks that asynq holds them,
// the long form waits until they are delivered.
func TestWorkerKilled(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	const conc, perWorker = 6, 2
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance, MaxConcurrent: conc, Latency: 50 * time.Millisecond})
	f := newFleet(t, policyFor(a, quota, fmt.Sprintf("    concurrency: %d\n    lease: 2s\n", conc)), "-redis", "redis://"+srv.Addr()+"/0")
	start := func() *workerProc { return f.start("-concurrency", fmt.Sprint(perWorker)) }
	workers := []*workerProc{start(), start(), start()}
	rdb := srv.Client(t)

	tenants := []string{"t0", "t1", "t2", "t3", "t4", "t5"}
	n := pick(300, 800)
	kills := pick(3, 10)
	ids := f.enqueueJobs(a.jobs("w", n, tenants))
	began := time.Now()
	var lastKill time.Time
	for k := range kills {
		target := (k + 1) * n / (kills + 2)
		poll(t, time.Duration(n/quota+60)*time.Second, func() bool { return a.delivered(ids) >= target },
			func() string {
				return fmt.Sprintf("%d of %d delivered, waiting for %d before kill %d", a.delivered(ids), n, target, k+1)
			})
		i := k % len(workers)
		workers[i].kill()
		lastKill = time.Now()
		workers[i] = start()
	}
	d := a.delivered(ids)
	t.Logf("%d workers killed in %v, one every %v; %d of %d jobs delivered at the last kill",
		kills, lastKill.Sub(began).Round(time.Millisecond), (lastKill.Sub(began) / time.Duration(kills)).Round(time.Millisecond), d, n)

	missing, places := settle(t, a, rdb, ids, tenants, pick(90*time.Second, 9*time.Minute))
	checkDelivery(t, a, ids, missing, places, true)
	if len(missing) > kills*perWorker {
		t.Errorf("%d jobs wait for asynq's lease recovery; at most %d (%d per killed worker) can have been running", len(missing), kills*perWorker, perWorker)
	}
	if long() {
		calls := a.snapshot()
		t.Logf("the last job was delivered %v after the last kill", calls[len(calls)-1].at.Sub(lastKill).Round(time.Second))
	}
	checkQuota(t, a, quota, tolerance)

	// The killed workers' concurrency leases have run out: no lease is
	// live once the fleet is idle.
	leases, _ := keyspace.Key("sluice:th", "conc", "api")
	poll(t, 10*time.Second, func() bool {
		now, err := rdb.Time(context.Background()).Result()
		if err != nil {
			return false
		}
		live, err := rdb.ZCount(context.Background(), leases, fmt.Sprint(now.UnixMicro()), "+inf").Result()
		return err == nil && live == 0
	}, func() string {
		v, _ := rdb.ZRangeWithScores(context.Background(), leases, 0, -1).Result()
		return fmt.Sprintf("concurrency leases still live on an idle fleet: %v", v)
	})
}

// TestGracefulStop: every worker gets SIGTERM while its calls are in
// flight and the API holds every answer back, so that no call can finish
// (their own timeout is a minute):
// a worker that waited for its calls instead of keeping to its 1s
// -shutdown-timeout would never exit. Each worker exits 0 by itself; the
// calls it had running are cut short; the jobs that were running went
// back to asynq's queue: none is left active for asynq's lease recovery,
// none is lost. New workers then deliver every job at once.
func TestGracefulStop(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance, Latency: 1500 * time.Millisecond})
	f := newFleet(t, policyFor(a, quota, "    timeout: 60s\n"), "-redis", "redis://"+srv.Addr()+"/0")
	workers := []*workerProc{f.start("-shutdown-timeout", "1s"), f.start("-shutdown-timeout", "1s")}
	rdb := srv.Client(t)

	n := pick(80, 300)
	ids := f.enqueueJobs(a.jobs("g", n, tenants4))
	poll(t, 60*time.Second, func() bool { return a.delivered(ids) >= 12 },
		func() string { return fmt.Sprintf("%d of %d delivered before the stop", a.delivered(ids), n) })

	poll(t, 10*time.Second, func() bool { return a.inFlight() > 0 }, func() string { return "no call in flight" })
	a.hold()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			took, clean := w.stop(30 * time.Second)
			code := w.cmd.ProcessState.ExitCode()
			t.Logf("%s exited %d, %v after SIGTERM", w.name, code, took.Round(time.Millisecond))
			if !clean || code != 0 {
				t.Errorf("%s: exit %d after %v (by itself: %v); want 0, by itself, with its calls held", w.name, code, took, clean)
			}
		})
	}
	wg.Wait()
	gone := time.Now()
	poll(t, 10*time.Second, func() bool { return a.inFlight() == 0 },
		func() string { return fmt.Sprintf("%d held calls still open after their workers exited", a.inFlight()) })

	// Nothing is left active for asynq's lease recovery.
	where, err := census(context.Background(), rdb, tenants4)
	if err != nil {
		t.Fatal(err)
	}
	missing := a.missing(ids)
	places := summarize(where, missing)
	aborted := 0
	for _, c := range a.callsBetween(time.Time{}, gone) {
		if c.status == 0 {
			aborted++
		}
	}
	t.Logf("after the stop: %d calls were cut short; the %d undelivered jobs are %v", aborted, len(missing), places)
	if aborted == 0 {
		t.Error("no call was cut short by the stop, though calls were in flight and held")
	}
	// Each worker's last line says what became of the jobs it was running:
	// every call cut short was a job returned to the queue.
	returned := 0
	for _, w := range workers {
		m := regexp.MustCompile(`msg="sluice worker stopped" .*returned_to_queue=(\d+)`).FindStringSubmatch(w.logs.String())
		if m == nil {
			t.Fatalf("%s logged no stop line with returned_to_queue:\n%s", w.name, w.logs.String())
		}
		n, _ := strconv.Atoi(m[1])
		returned += n
	}
	if returned < aborted {
		t.Errorf("the workers logged %d jobs returned to the queue; %d calls were cut short", returned, aborted)
	}
	for s, k := range places {
		if strings.HasPrefix(s, "asynq:active") || s == "nowhere" || s == "asynq:archived" {
			t.Errorf("%d jobs are %s after a graceful stop", k, s)
		}
	}
	if cs := a.callsBetween(gone, time.Now()); len(cs) > 0 {
		t.Errorf("%d calls reached the downstream with no worker running", len(cs))
	}
	a.release()

	// New workers deliver every job, without waiting for any lease.
	f.start("-concurrency", "8")
	f.start("-concurrency", "8")
	restart := time.Now()
	poll(t, time.Duration(n/quota+60)*time.Second, func() bool { return len(a.missing(ids)) == 0 },
		func() string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			where, err := census(ctx, rdb, tenants4)
			return fmt.Sprintf("%d jobs not delivered: %v %v", len(a.missing(ids)), summarize(where, a.missing(ids)), err)
		})
	t.Logf("the new workers delivered the rest in %v", time.Since(restart).Round(time.Millisecond))
	checkDelivery(t, a, ids, nil, nil, false)
	checkQuota(t, a, quota, tolerance)
}

// clusterFleet returns the cluster flags of a fleet on c.
func clusterFlags(c *redistest.Cluster) []string {
	return []string{"-redis-cluster", strings.Join(c.Addrs(), ",")}
}

// noCrossSlot fails t when any worker's log mentions CROSSSLOT.
func noCrossSlot(t *testing.T, f *fleet, outputs ...string) {
	t.Helper()
	f.mu.Lock()
	procs := slices.Clone(f.procs)
	f.mu.Unlock()
	for _, p := range procs {
		outputs = append(outputs, p.logs.String())
	}
	for _, o := range outputs {
		if strings.Contains(o, "CROSSSLOT") {
			t.Errorf("CROSSSLOT error: %s", tail(o, 2000))
		}
	}
}

// TestClusterEndToEnd: the end-to-end scenario on a three-master Redis
// Cluster: three workers with -redis-cluster, jobs from the CLI (with
// -redis-cluster) and the HTTP endpoint; every job reaches the downstream
// exactly once, no 429, the quota holds, a tenant over its admission
// policy is refused (exit 3), and no command fails with CROSSSLOT.
func TestClusterEndToEnd(t *testing.T) {
	c := redistest.StartCluster(t)
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance})
	f := newFleet(t, policyFor(a, quota, ""), clusterFlags(c)...)
	workers := []*workerProc{f.start(), f.start(), f.start()}

	n := pick(60, 300)
	ids := f.enqueueJobs(a.jobs("c", n, []string{"t0", "t1", "t2"}))
	for i := range 40 {
		id := fmt.Sprintf("ch%02d", i)
		code, body, err := post(workers[i%3].addr, a.jobLine(id, fmt.Sprintf("h%d", i%4)))
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("POST /enqueue: %d %+v %v", code, body, err)
		}
		ids = append(ids, id)
	}
	var outputs []string
	for i := range 4 {
		id := fmt.Sprintf("cl%d", i)
		r := f.enqueue("", "-tenant", "limited", "-type", "sluice.http", "-downstream", "api", "-id", id,
			"-payload", fmt.Sprintf(`{"url":"%s/api/jobs/%s"}`, a.URL(), id))
		outputs = append(outputs, r.stderr)
		switch {
		case i < 3 && r.code != 0:
			t.Fatalf("limited job %d: exit %d: %s", i, r.code, r.stderr)
		case i < 3:
			ids = append(ids, id)
		case r.code != 3 || !strings.Contains(r.stderr, "rate limited"):
			t.Fatalf("the fourth limited job: exit %d, %s; want exit 3 saying rate limited", r.code, r.stderr)
		}
	}

	start := time.Now()
	poll(t, time.Duration(len(ids)/quota+60)*time.Second, func() bool { return len(a.missing(ids)) == 0 },
		func() string { return fmt.Sprintf("%d of %d jobs not delivered", len(a.missing(ids)), len(ids)) })
	t.Logf("%d jobs drained in %v", len(ids), time.Since(start).Round(time.Millisecond))
	// A duplicate would arrive within a pace interval or two.
	time.Sleep(300 * time.Millisecond)
	if dup2xx, resent := checkDelivery(t, a, ids, nil, nil, false); dup2xx+resent != 0 {
		t.Errorf("%d duplicate 2xx, %d calls re-sent; want exactly once without faults", dup2xx, resent)
	}
	checkQuota(t, a, quota, tolerance)
	noCrossSlot(t, f, outputs...)
}

// nodeOf returns the index of the master of c that serves key.
func nodeOf(t *testing.T, c *redistest.Cluster, rdb *redis.ClusterClient, key string) int {
	t.Helper()
	ctx := context.Background()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			for i, addr := range c.Addrs() {
				if s.Nodes[0].Addr == addr {
					return i
				}
			}
		}
	}
	t.Fatalf("no master serves slot %d of %s", slot, key)
	return -1
}

// TestClusterMasterRestart: the master that holds the waiting room is
// restarted (SIGTERM, then started again on its port with its nodes.conf)
// while three workers drain a backlog. The cluster is down meanwhile (no
// replicas: the other masters refuse every command until it is back); the
// workers resume by themselves once it is whole again, and every accepted
// job reaches the downstream.
//
// redistest.StartCluster takes no redis-server arguments, so the node
// cannot run with --appendonly yes; the test gives it a save point with
// CONFIG SET instead, which makes SIGTERM write an RDB that the restarted
// node loads. That covers a graceful restart, not a crash.
func TestClusterMasterRestart(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance})
	f := newFleet(t, policyFor(a, quota, ""), clusterFlags(c)...)
	f.start()
	f.start()
	f.start()

	meta := queue.DefaultPrefix + ":meta:{" + queueName + "}"
	i := nodeOf(t, c, rdb, meta)
	if j := nodeOf(t, c, rdb, "asynq:{"+queueName+"}:pending"); j != i {
		t.Fatalf("the waiting room is on master %d, asynq's queue on master %d; want one slot", i, j)
	}
	node := c.Node(i)
	nc := node.Client(t)
	if err := nc.ConfigSet(context.Background(), "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiting room and asynq's queue are on master %d (%s)", i, node.Addr())

	n := pick(150, 400)
	ids := f.enqueueJobs(a.jobs("m", n, tenants4))
	poll(t, time.Duration(n/quota+60)*time.Second, func() bool { return a.delivered(ids) >= n/3 },
		func() string { return fmt.Sprintf("%d of %d delivered before the restart", a.delivered(ids), n) })

	down := time.Now()
	node.Restart(t)
	c.WaitHealthy(t)
	up := time.Now()
	var resumed time.Duration
	poll(t, 30*time.Second, func() bool {
		at, ok := a.firstCallAfter(up)
		resumed = at.Sub(up)
		return ok
	}, func() string { return "no call reached the downstream after the cluster was whole again" })
	t.Logf("master %d restarted: the cluster was whole again after %v; first downstream call %v later",
		i, up.Sub(down).Round(time.Millisecond), resumed.Round(time.Millisecond))

	missing, places := settle(t, a, rdb, ids, tenants4, pick(90*time.Second, 9*time.Minute))
	checkDelivery(t, a, ids, missing, places, true)
	checkQuota(t, a, quota, tolerance)
	noCrossSlot(t, f)
}

// TestDownstreamPauses: the downstream answers every call with 429 and
// Retry-After in seconds, then 429 with Retry-After as an HTTP-date, then
// 429 with no Retry-After, then 503 with none, each for a few seconds,
// while two workers have a backlog. The fleet pauses for what each asks
// (1s when it says nothing). Each of the fleet's workers sends one call at
// a time and, once refused, books its next call after the pause it set, so
// no window as wide as the pause holds more calls than the fleet has in
// flight; the calls in each phase stay within a bound derived from the
// pause. Both bounds count calls, so a busy machine, which only delays
// calls, cannot break them. Every job completes once the downstream
// recovers.
func TestDownstreamPauses(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance})
	f := newFleet(t, policyFor(a, quota, "    timeout: 1s\n"), "-redis", "redis://"+srv.Addr()+"/0")
	f.start()
	f.start()
	const inFlight = 2 * 4 // workers × concurrency: the most calls out at once
	rdb := srv.Client(t)

	n := pick(120, 300)
	ids := f.enqueueJobs(a.jobs("p", n, tenants4))
	poll(t, 60*time.Second, func() bool { return a.delivered(ids) >= 10 },
		func() string { return fmt.Sprintf("%d of %d delivered before the faults", a.delivered(ids), n) })

	hold := pick(4500*time.Millisecond, 10*time.Second)
	phases := []struct {
		name  string
		fault downstreamtest.Fault
		pause time.Duration // the least the fleet must wait after a refusal
	}{
		{"429 Retry-After: 2", downstreamtest.Fault429Seconds(2), 2 * time.Second},
		{"429 Retry-After: <HTTP-date 2s ahead>", downstreamtest.Fault429Date(2 * time.Second), 2 * time.Second},
		{"429 without Retry-After", downstreamtest.Fault429NoHeader, time.Second},
		{"503 without Retry-After", downstreamtest.Fault503(0), time.Second},
	}
	// A pause is set by the worker that got the refusal, from when it read
	// it; a call arriving at the fake a pause after an earlier one may
	// show a few ms less between the two arrivals.
	const slack = 50 * time.Millisecond
	for _, ph := range phases {
		a.fake.SetFault(ph.fault)
		from := time.Now()
		time.Sleep(hold) // the fault lasts this long: the scenario, not a wait for an outcome
		to := time.Now()
		calls := a.callsBetween(from, to)
		var arrivals []time.Time
		for _, c := range calls {
			arrivals = append(arrivals, c.at)
		}
		// Within a pause only the calls booked before it was set arrive:
		// at most one per call in flight.
		most := downstreamtest.MaxInWindow(arrivals, ph.pause-slack)
		// At most every call in flight once per pause.
		bound := (int(hold/ph.pause) + 1) * inFlight
		t.Logf("%s for %v: %d calls, most in a window of %v %d (calls in flight %d); bound %d (at quota: %d)",
			ph.name, hold.Round(time.Millisecond), len(calls), ph.pause-slack, most, inFlight, bound, int(hold.Seconds()*quota))
		if most > inFlight {
			t.Errorf("%s: %d calls within %v; the fleet should pause %v, with at most %d calls in flight", ph.name, most, ph.pause-slack, ph.pause, inFlight)
		}
		if len(calls) == 0 {
			t.Errorf("%s: no call at all: the fleet should try again after each pause", ph.name)
		}
		if len(calls) > bound {
			t.Errorf("%s: %d calls in %v; at most %d expected with a pause of %v", ph.name, len(calls), hold, bound, ph.pause)
		}
		for _, c := range calls {
			if c.status == http.StatusOK {
				t.Errorf("%s: a call got 200 during the fault", ph.name)
				break
			}
		}
	}
	a.fake.SetFault(downstreamtest.FaultNone)
	recovered := time.Now()

	missing, places := settle(t, a, rdb, ids, tenants4, time.Duration(n/quota+60)*time.Second)
	checkDelivery(t, a, ids, missing, places, false)
	t.Logf("every job delivered %v after the downstream recovered", time.Since(recovered).Round(time.Millisecond))
	// The refusals were the faults'; the quota itself was never exceeded.
	c := a.fake.Counts()
	most := downstreamtest.MaxInWindow(a.fake.Arrivals(), time.Second)
	t.Logf("downstream: %d calls, %v by status, most in one second %d", c.Total, c.ByStatus, most)
	if most > quota+tolerance {
		t.Errorf("%d calls in one second; quota %d, tolerance %d", most, quota, tolerance)
	}
}

// TestDownstreamHang: the downstream holds every call without answering
// for a few seconds. Each call is given up after the policy's timeout
// (1s), so the fleet never has more calls out than its workers'
// concurrency; the jobs concerned are retried with asynq's backoff. Every
// job completes once the downstream answers again (the default run checks
// that the retried ones are in asynq's retry set; the long form waits for
// them).
func TestDownstreamHang(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	a := newAPI(t, downstreamtest.Config{Rate: quota, Tolerance: tolerance})
	const timeout = time.Second
	f := newFleet(t, policyFor(a, quota, "    timeout: 1s\n"), "-redis", "redis://"+srv.Addr()+"/0")
	f.start()
	f.start()
	const inFlight = 2 * 4
	rdb := srv.Client(t)

	n := pick(80, 200)
	ids := f.enqueueJobs(a.jobs("h", n, tenants4))
	poll(t, 60*time.Second, func() bool { return a.delivered(ids) >= 10 },
		func() string { return fmt.Sprintf("%d of %d delivered before the fault", a.delivered(ids), n) })

	hold := pick(2500*time.Millisecond, 6*time.Second)
	a.fake.SetFault(downstreamtest.FaultHang)
	from := time.Now()
	time.Sleep(hold) // the fault lasts this long
	to := time.Now()
	a.fake.SetFault(downstreamtest.FaultNone)

	// Every hung call ends when its worker gives up, a timeout after it
	// started.
	var hung []apiCall
	poll(t, 10*time.Second, func() bool {
		hung = a.callsBetween(from, to)
		for _, c := range hung {
			if c.ended.IsZero() {
				return false
			}
		}
		return true
	}, func() string { return "hung calls still open 10s after the fault ended" })
	shortest, longest := time.Duration(0), time.Duration(0)
	for _, c := range hung {
		d := c.ended.Sub(c.at)
		if shortest == 0 || d < shortest {
			shortest = d
		}
		longest = max(longest, d)
		if c.status != 0 {
			t.Errorf("a call during the hang got %d", c.status)
		}
	}
	// Each of the inFlight runners is held a timeout per call, less the
	// time between its timer's start and the call's arrival here, which a
	// busy machine stretches to a few hundred ms.
	const lag = 250 * time.Millisecond
	bound := (int(hold/(timeout-lag)) + 1) * inFlight
	t.Logf("hang for %v: %d calls, each given up after %v to %v; bound %d (at quota: %d)",
		hold.Round(time.Millisecond), len(hung), shortest.Round(time.Millisecond), longest.Round(time.Millisecond), bound, int(hold.Seconds()*quota))
	if len(hung) == 0 || len(hung) > bound {
		t.Errorf("%d calls during a hang of %v; want 1 to %d (%d workers' slots, each held %v)", len(hung), hold, bound, inFlight, timeout)
	}
	if shortest < timeout-lag || longest > timeout+3*time.Second {
		t.Errorf("hung calls were given up after %v to %v; the policy's timeout is %v", shortest, longest, timeout)
	}

	// Where the hung jobs are now: asynq's retry set, due after its
	// backoff.
	ins := asynq.NewInspectorFromRedisClient(rdb)
	retry, err := ins.ListRetryTasks(queueName, asynq.PageSize(500))
	if err != nil {
		t.Fatal(err)
	}
	var soonest, latest time.Duration
	for _, ti := range retry {
		d := time.Until(ti.NextProcessAt)
		if soonest == 0 || d < soonest {
			soonest = d
		}
		latest = max(latest, d)
	}
	t.Logf("%d jobs in asynq's retry set, due in %v to %v", len(retry), soonest.Round(time.Second), latest.Round(time.Second))

	recovered := time.Now()
	missing, places := settle(t, a, rdb, ids, tenants4, pick(90*time.Second, 3*time.Minute))
	checkDelivery(t, a, ids, missing, places, true)
	if len(missing) == 0 {
		t.Logf("every job delivered %v after the downstream answered again", time.Since(recovered).Round(time.Millisecond))
	}
	for s := range places {
		if s != "asynq:retry" {
			t.Errorf("undelivered jobs are %s; only asynq's retry backoff should hold them", s)
		}
	}
}

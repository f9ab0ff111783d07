package e2e

// Helpers of the fault tests (faults_test.go): worker processes that can be
// killed and replaced, the enqueue CLI, a downstream that records which job
// each call belongs to, and a census of where every job is in Redis.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/queue"
)

// longFlag selects the fault tests' long forms: more jobs and faults, and
// waiting out asynq's lease recovery and retry backoff (minutes) instead of
// checking that the jobs concerned are held by asynq. SLUICE_E2E_LONG=1
// does the same for runs that cannot pass test flags (go test ./...).
var longFlag = flag.Bool("sluice.long", false, "run the fault tests' long forms (minutes)")

func long() bool {
	if *longFlag {
		return true
	}
	v, _ := strconv.ParseBool(os.Getenv("SLUICE_E2E_LONG"))
	return v
}

// pick returns short, or long in the long form.
func pick[T any](short, longer T) T {
	if long() {
		return longer
	}
	return short
}

// queueName is the queue of every fault test's policy file.
const queueName = "e2e"

// poll calls cond every 50ms until it returns true, and fails t with
// what() when within has passed first. It returns how long it took.
func poll(t *testing.T, within time.Duration, cond func() bool, what func() string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// syncBuffer is a bytes.Buffer that a process writes while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// fleet runs worker processes on one policy file and one Redis (or Redis
// Cluster), and the enqueue CLI against the same.
type fleet struct {
	t         *testing.T
	workerBin string
	cliBin    string
	policy    string
	redis     []string // connection flags: -redis URL, or -redis-cluster addrs
	mu        sync.Mutex
	procs     []*workerProc
	started   int
}

// newFleet writes the policy file and builds the commands (once per test
// binary).
func newFleet(t *testing.T, policy string, redisFlags ...string) *fleet {
	t.Helper()
	worker, cli := binaries(t)
	path := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fleet{t: t, workerBin: worker, cliBin: cli, policy: path, redis: redisFlags}
}

// workerProc is one worker process.
type workerProc struct {
	name  string
	addr  string // its HTTP endpoints
	cmd   *exec.Cmd
	logs  *syncBuffer
	done  chan struct{} // closed once reaped
	began time.Time
}

// exited reports whether the process has been reaped.
func (p *workerProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start starts a worker with -concurrency 4 and -shutdown-timeout 3s
// unless extra says otherwise (later flags win), and waits until its
// /healthz answers 200.
func (f *fleet) start(extra ...string) *workerProc {
	t := f.t
	t.Helper()
	f.mu.Lock()
	f.started++
	name := fmt.Sprintf("worker-%d", f.started)
	f.mu.Unlock()
	addr := freeAddr(t)
	args := append([]string{"-policy", f.policy, "-listen", addr, "-concurrency", "4", "-shutdown-timeout", "3s"}, f.redis...)
	args = append(args, extra...)
	cmd := exec.Command(f.workerBin, args...)
	p := &workerProc{name: name, addr: addr, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.began = time.Now()
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	t.Cleanup(func() {
		p.stop(20 * time.Second)
		if t.Failed() {
			t.Logf("%s (%s) log:\n%s", p.name, p.cmd.ProcessState, tail(p.logs.String(), 6000))
		}
	})
	client := &http.Client{Timeout: 3 * time.Second}
	deadline := time.Now().Add(45 * time.Second)
	for {
		if p.exited() {
			t.Fatalf("%s exited while starting (%v):\n%s", name, cmd.ProcessState, p.logs.String())
		}
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy after 45s (%v):\n%s", name, err, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *workerProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to within for the exit, then kills. It
// returns how long the process took to exit after SIGTERM and whether it
// did so by itself.
func (p *workerProc) stop(within time.Duration) (time.Duration, bool) {
	if p.exited() {
		return 0, true
	}
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return time.Since(start), true
	case <-time.After(within):
		p.kill()
		return time.Since(start), false
	}
}

// healthy reports whether the worker's /healthz answers 200.
func (p *workerProc) healthy() bool {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + p.addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logged counts the lines of every worker's log that contain s.
func (f *fleet) logged(s string) int {
	f.mu.Lock()
	procs := slices.Clone(f.procs)
	f.mu.Unlock()
	n := 0
	for _, p := range procs {
		n += strings.Count(p.logs.String(), s)
	}
	return n
}

// cliResult is one run of the enqueue CLI.
type cliResult struct {
	code   int
	stdout string
	stderr string
	took   time.Duration
}

// enqueue runs the CLI with args (the policy and Redis flags are added)
// and stdin, bounded to two minutes.
func (f *fleet) enqueue(stdin string, args ...string) cliResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{"-policy", f.policy}, f.redis...)
	cmd := exec.CommandContext(ctx, f.cliBin, append(all, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		f.t.Fatalf("enqueue: %v", err)
	}
	return r
}

// enqueueJobs enqueues the jobs as JSON lines through the CLI, requires
// that every one is accepted, and returns their ids.
func (f *fleet) enqueueJobs(lines []string) []string {
	f.t.Helper()
	r := f.enqueue(strings.Join(lines, "\n")+"\n", "-f", "-", "-q")
	var ids []string // one "accepted <line> <id>" per job, in order
	for i, out := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if f := strings.Fields(out); len(f) == 3 && f[0] == "accepted" && f[1] == strconv.Itoa(i+1) {
			ids = append(ids, f[2])
		}
	}
	if r.code != 0 || len(ids) != len(lines) {
		f.t.Fatalf("enqueue -f: exit %d, %d of %d accepted\n%s", r.code, len(ids), len(lines), r.stderr)
	}
	return ids
}

// post sends one job to a worker's POST /enqueue and returns the status
// and the decoded answer.
func post(addr, body string) (int, queue.EnqueueResponse, error) {
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post("http://"+addr+"/enqueue", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, queue.EnqueueResponse{}, err
	}
	defer resp.Body.Close()
	var r queue.EnqueueResponse
	err = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r, err
}

// jobLine is one sluice.http job for the JSON lines of the CLI (and the
// body of POST /enqueue): a POST to the api downstream at a path that
// names the job, so that the recorder knows whose call it is.
func (a *api) jobLine(id, tenant string) string {
	return fmt.Sprintf(`{"id":%q,"tenant":%q,"type":"sluice.http","downstream":"api","payload":{"method":"POST","url":%q,"body":%q}}`,
		id, tenant, a.URL()+"/api/jobs/"+id, id)
}

// jobs returns n job lines with ids prefix0001... spread over tenants.
func (a *api) jobs(prefix string, n int, tenants []string) (lines []string) {
	for i := range n {
		lines = append(lines, a.jobLine(fmt.Sprintf("%s%04d", prefix, i), tenants[i%len(tenants)]))
	}
	return lines
}

// api is the downstream of the fault tests: a downstreamtest.Server enforcing the
// quota behind a recording proxy that notes which job each call belongs
// to (from its path), when it arrived, its status and when it ended.
type api struct {
	fake  *downstreamtest.Server
	proxy *httptest.Server
	mu    sync.Mutex
	calls []apiCall
	held  chan struct{} // while non-nil, answers wait until it closes (hold)
}

type apiCall struct {
	id     string
	at     time.Time
	ended  time.Time
	status int    // 0 when the caller gave up before an answer
	idem   string // its Idempotency-Key
}

// newAPI starts the fake and the proxy; both stop when t ends (the fake
// first, which releases calls it holds).
func newAPI(t *testing.T, cfg downstreamtest.Config) *api {
	t.Helper()
	a := &api{fake: downstreamtest.NewServer(cfg)}
	target, _ := url.Parse(a.fake.URL())
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	a.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strings.CutPrefix(r.URL.Path, "/api/jobs/")
		a.mu.Lock()
		i := len(a.calls)
		a.calls = append(a.calls, apiCall{id: id, at: time.Now(), idem: r.Header.Get("Idempotency-Key")})
		a.mu.Unlock()
		sw := &statusWriter{ResponseWriter: w, gate: func() {
			a.mu.Lock()
			held := a.held
			a.mu.Unlock()
			if held != nil {
				select {
				case <-held:
				case <-r.Context().Done():
				}
			}
		}}
		rp.ServeHTTP(sw, r)
		a.mu.Lock()
		a.calls[i].ended = time.Now()
		if r.Context().Err() == nil {
			a.calls[i].status = sw.status
		}
		a.mu.Unlock()
	}))
	t.Cleanup(func() {
		a.release()
		a.fake.Close()
		a.proxy.Close()
		tr.CloseIdleConnections()
	})
	return a
}

// statusWriter notes a response's status; gate runs before the status
// is written (api.hold).
type statusWriter struct {
	http.ResponseWriter
	status int
	gate   func()
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.gate()
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// hold keeps every answer, to calls in flight and to new ones, from
// reaching its caller until release: a caller that gives up meanwhile is
// recorded with status 0.
func (a *api) hold() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held == nil {
		a.held = make(chan struct{})
	}
}

// release lets held answers through.
func (a *api) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held != nil {
		close(a.held)
		a.held = nil
	}
}

// inFlight counts the calls not answered yet.
func (a *api) inFlight() int {
	n := 0
	for _, c := range a.snapshot() {
		if c.ended.IsZero() {
			n++
		}
	}
	return n
}

// URL is the downstream's base URL (the proxy's).
func (a *api) URL() string { return a.proxy.URL }

// snapshot returns a copy of the calls so far, in arrival order.
func (a *api) snapshot() []apiCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// okCounts returns how many calls of each job got a 2xx.
func (a *api) okCounts() map[string]int {
	m := map[string]int{}
	for _, c := range a.snapshot() {
		if c.status >= 200 && c.status < 300 {
			m[c.id]++
		}
	}
	return m
}

// missing returns the ids that have not had a 2xx yet.
func (a *api) missing(ids []string) []string {
	ok := a.okCounts()
	var m []string
	for _, id := range ids {
		if ok[id] == 0 {
			m = append(m, id)
		}
	}
	return m
}

// delivery sums up the calls of ids: how many jobs got a 2xx, how many
// extra 2xx there were (a job answered 2xx more than once), and how many
// calls were sent again after one the downstream may have acted on (any
// answer but a refusal, 429 or 503, including calls cut short or held
// without an answer): the duplicates that at-least-once delivery allows.
func (a *api) delivery(ids []string) (delivered, dup2xx, resent int) {
	ok, acted := map[string]int{}, map[string]int{}
	for _, c := range a.snapshot() {
		if c.status >= 200 && c.status < 300 {
			ok[c.id]++
		}
		if c.status != http.StatusTooManyRequests && c.status != http.StatusServiceUnavailable {
			acted[c.id]++
		}
	}
	for _, id := range ids {
		if n := ok[id]; n > 0 {
			delivered++
			dup2xx += n - 1
		}
		if n := acted[id]; n > 1 {
			resent += n - 1
		}
	}
	return delivered, dup2xx, resent
}

// delivered counts the jobs of ids that have had a 2xx.
func (a *api) delivered(ids []string) int {
	d, _, _ := a.delivery(ids)
	return d
}

// callsBetween returns the calls that arrived in [from, to).
func (a *api) callsBetween(from, to time.Time) []apiCall {
	var cs []apiCall
	for _, c := range a.snapshot() {
		if !c.at.Before(from) && c.at.Before(to) {
			cs = append(cs, c)
		}
	}
	return cs
}

// firstCallAfter returns the arrival of the first call at or after t, if
// any.
func (a *api) firstCallAfter(t time.Time) (time.Time, bool) {
	for _, c := range a.snapshot() {
		if !c.at.Before(t) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// checkQuota fails t when the fake refused a call for its quota (outside
// scripted faults) or saw more than quota+tolerance calls in a second.
func checkQuota(t *testing.T, a *api, quota, tolerance int) {
	t.Helper()
	c := a.fake.Counts()
	most := downstreamtest.MaxInWindow(a.fake.Arrivals(), time.Second)
	t.Logf("downstream: %d calls, %d OK, %d refused (429), most in one second %d (quota %d + tolerance %d), most in flight %d",
		c.Total, c.OK, c.Limited, most, quota, tolerance, c.MaxInFlight)
	if c.Limited != 0 {
		t.Errorf("the downstream refused %d calls with 429; want none", c.Limited)
	}
	if most > quota+tolerance {
		t.Errorf("%d calls in one second; quota %d, tolerance %d", most, quota, tolerance)
	}
}

// census says where each job is in Redis: "asynq:<state>" (with
// "+orphaned" for an active task whose worker's lease ran out; a job
// handed over and not yet taken is "asynq:pending") or "waiting" (in its
// tenant's list) or "handing" (taken for the hand-over); a job found
// nowhere is absent from the map.
func census(ctx context.Context, rdb redis.UniversalClient, tenants []string) (map[string]string, error) {
	where := map[string]string{}
	ins := asynq.NewInspectorFromRedisClient(rdb)
	lists := []struct {
		state string
		list  func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	}{
		{"pending", ins.ListPendingTasks},
		{"active", ins.ListActiveTasks},
		{"scheduled", ins.ListScheduledTasks},
		{"retry", ins.ListRetryTasks},
		{"archived", ins.ListArchivedTasks},
	}
	for _, l := range lists {
		for page := 1; ; page++ {
			tasks, err := l.list(queueName, asynq.PageSize(500), asynq.Page(page))
			if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
				return nil, fmt.Errorf("asynq %s tasks: %w", l.state, err)
			}
			for _, ti := range tasks {
				// Task ids are sluice:<tenant>/<job id>@<nonce>:<hand-overs>
				// (queue.Job.ScopedID before the '@').
				id, ok := strings.CutPrefix(ti.ID, "sluice:")
				if i := strings.LastIndexByte(id, ':'); ok && i > 0 {
					id = id[:i]
				}
				id, _, _ = strings.Cut(id, "@")
				if _, bare, scoped := strings.Cut(id, "/"); scoped {
					id = bare
				}
				s := "asynq:" + l.state
				if ti.IsOrphaned {
					s += "+orphaned"
				}
				where[id] = s
			}
			if len(tasks) < 500 {
				break
			}
		}
	}
	// The waiting room's keys carry asynq's hash tag, {<queue>}.
	tag := "{" + queueName + "}"
	prefix := queue.DefaultPrefix + ":t:" + tag
	for _, tenant := range tenants {
		enc, _ := keyspace.Encode(tenant)
		entries, err := rdb.LRange(ctx, prefix+":"+enc, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if id, ok := entryID(e); ok {
				where[id] = "waiting"
			}
		}
	}
	// Taken by a claim, its asynq task not yet written (docs/queue.md,
	// The hand-over).
	handing, err := rdb.ZRange(ctx, queue.DefaultPrefix+":handing:"+tag, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	for _, e := range handing {
		if id, ok := entryID(e); ok && where[id] == "" {
			where[id] = "handing"
		}
	}
	return where, nil
}

// entryID returns the job id of a waiting-room entry, read from the asynq
// task id in its header's task field (docs/queue.md, Entries):
// sluice:<tenant>/<id>@<nonce>:<moves>.
func entryID(e string) (string, bool) {
	header, _, ok := strings.Cut(e, "\n")
	if !ok || !strings.HasPrefix(header, "sluice/2\t") {
		return "", false
	}
	_, task, ok := strings.Cut(header, "\ttask=")
	if !ok {
		return "", false
	}
	task, _, _ = strings.Cut(task, "\t")
	_, id, _ := strings.Cut(task, "/")
	id, _, ok = strings.Cut(id, "@")
	return id, ok
}

// summarize counts the places of ids ("nowhere" for those absent).
func summarize(where map[string]string, ids []string) map[string]int {
	m := map[string]int{}
	for _, id := range ids {
		s := where[id]
		if s == "" {
			s = "nowhere"
		}
		m[s]++
	}
	return m
}

// heldByAsynq reports whether a job at place s will run again without
// anyone's help: asynq has it pending, scheduled, in its retry set, or
// active (held by a live worker, or by a dead one whose lease asynq's
// recoverer will reclaim).
func heldByAsynq(s string) bool {
	return strings.HasPrefix(s, "asynq:") && !strings.HasPrefix(s, "asynq:archived")
}

// settle waits until every job of ids has had a 2xx from the downstream
// or, outside the long form, until the jobs that have not are all held in
// Redis in a state from which they will run again by themselves (asynq's
// retry backoff, the lease of a killed worker) and the live fleet has nothing else left to do: the
// same jobs missing for 3 seconds. In the long form it waits for every
// job. It returns the jobs still missing and their places.
func settle(t *testing.T, a *api, rdb redis.UniversalClient, ids, tenants []string, within time.Duration) ([]string, map[string]int) {
	t.Helper()
	var missing, lastMissing []string
	var places map[string]int
	stableSince := time.Time{}
	poll(t, within, func() bool {
		missing = a.missing(ids)
		places = map[string]int{}
		if len(missing) == 0 {
			return true
		}
		if long() {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		where, err := census(ctx, rdb, tenants)
		if err != nil {
			return false
		}
		places = summarize(where, missing)
		for _, id := range missing {
			if s := where[id]; !heldByAsynq(s) || s == "asynq:pending" {
				lastMissing = nil
				return false
			}
		}
		if !slices.Equal(missing, lastMissing) {
			lastMissing, stableSince = missing, time.Now()
			return false
		}
		return time.Since(stableSince) > 3*time.Second
	}, func() string {
		m := a.missing(ids)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		where, err := census(ctx, rdb, tenants)
		return fmt.Sprintf("%d of %d jobs have not reached the downstream; where they are: %v (census error %v); e.g. %v",
			len(m), len(ids), summarize(where, m), err, m[:min(len(m), 5)])
	})
	return missing, places
}

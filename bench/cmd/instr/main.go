// Command instr counts the instructions redis-server executes per job for
// sluice's enqueue and claim beside asynq's enqueue, under valgrind's
// callgrind. Timings on a shared 2-core machine move by more from one run
// to the next than a change to a script does; an instruction count of the
// same binary on the same input does not, so a change to a Lua script can
// be judged by it. It counts redis-server's own work in user space, not
// the kernel's for the round trip, which every system pays alike.
//
// Each workload runs twice on a fresh redis-server under callgrind, with n
// and then 3n jobs from one client, one call at a time; the difference of
// the two totals over 2n is the count per job, free of the server's start
// and stop. A claim's count is that of enqueue and claim less that of the
// enqueue alone.
//
//	cd bench && go run ./cmd/instr             # ~2 minutes at -n 2000
//	go run ./cmd/instr -n 500 -only sluice-enqueue
//
// Needs valgrind (apt-get install valgrind) and redis-server on the PATH,
// or $SLUICE_REDIS_SERVER.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/queue"
)

const queueName = "instr"

// workload puts n jobs through one system on client.
type workload struct {
	name string
	// base, when set, names the workload whose count this one's includes
	// and is reported less of (the enqueue before a claim).
	base string
	run  func(ctx context.Context, c *redis.Client, n int) error
	note string
}

var workloads = []workload{
	{name: "asynq-enqueue", run: asynqEnqueue,
		note: "asynq's `Client.EnqueueContext` of a no-op task with a 64-byte payload"},
	{name: "sluice-enqueue", run: sluiceEnqueue(100),
		note: "sluice's `Producer.Enqueue`, a token bucket that admits everything, 100 tenants, the default class"},
	{name: "sluice-claim-1", base: "sluice-enqueue-1", run: sluiceClaim(1),
		note: "the claim script handing over batches of 20 jobs of one tenant (asynq's pending list emptied between claims)"},
	{name: "sluice-claim-1000", base: "sluice-enqueue-1000", run: sluiceClaim(1000),
		note: "the same for 1,000 tenants with jobs"},
	{name: "sluice-enqueue-1", run: sluiceEnqueue(1)},
	{name: "sluice-enqueue-1000", run: sluiceEnqueue(1000)},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "instr:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 2000, "jobs of the smaller run of each workload (the larger has 3n)")
	only := flag.String("only", "", "comma-separated workloads to report (default all): asynq-enqueue, sluice-enqueue, sluice-claim-1, sluice-claim-1000")
	flag.Parse()
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return errors.New("valgrind not found; install it (apt-get install valgrind)")
	}
	server := os.Getenv("SLUICE_REDIS_SERVER")
	if server == "" {
		if server, err = exec.LookPath("redis-server"); err != nil {
			return errors.New("redis-server not found; install it (apt-get install redis-server) or set SLUICE_REDIS_SERVER")
		}
	}
	dir, err := os.MkdirTemp("", "sluice-instr-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	want := map[string]bool{}
	for _, w := range strings.Split(*only, ",") {
		if w != "" {
			want[w] = true
		}
	}
	byName := map[string]workload{}
	for _, w := range workloads {
		byName[w.name] = w
	}
	perJob := map[string]float64{}
	count := func(w workload) (float64, error) {
		if v, ok := perJob[w.name]; ok {
			return v, nil
		}
		var totals [2]int64
		for i, jobs := range []int{*n, 3 * *n} {
			t, err := measure(valgrind, server, dir, w, jobs)
			if err != nil {
				return 0, fmt.Errorf("%s, %d jobs: %w", w.name, jobs, err)
			}
			totals[i] = t
		}
		v := float64(totals[1]-totals[0]) / float64(2**n)
		perJob[w.name] = v
		fmt.Fprintf(os.Stderr, "%s: %.0f instructions per job\n", w.name, v)
		return v, nil
	}
	type row struct {
		w   workload
		per float64
	}
	var rows []row
	for _, w := range workloads {
		if w.note == "" || (len(want) > 0 && !want[w.name]) {
			continue
		}
		v, err := count(w)
		if err != nil {
			return err
		}
		if w.base != "" {
			b, err := count(byName[w.base])
			if err != nil {
				return err
			}
			v -= b
		}
		rows = append(rows, row{w, v})
	}
	base, haveBase := perJob["asynq-enqueue"]
	fmt.Printf("## redis-server instructions per job (callgrind, %d and %d jobs)\n\n", *n, 3**n)
	fmt.Printf("| workload | instructions per job | ÷ asynq's enqueue | what |\n| --- | --: | --: | --- |\n")
	for _, r := range rows {
		ratio := "—"
		if haveBase {
			ratio = fmt.Sprintf("%.2f", r.per/base)
		}
		fmt.Printf("| %s | %.0f | %s | %s |\n", r.w.name, r.per, ratio, r.w.note)
	}
	return nil
}

// measure runs w with jobs jobs on a fresh redis-server under callgrind
// and returns the instructions the server executed from start to exit.
func measure(valgrind, server, dir string, w workload, jobs int) (int64, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	out := filepath.Join(dir, fmt.Sprintf("%s.%d.out", w.name, jobs))
	// hz 1: the server's timer runs once a second, not ten times, so that
	// the slower run under callgrind adds little work of its own.
	cmd := exec.Command(valgrind, "--tool=callgrind", "-q", "--callgrind-out-file="+out,
		server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--hz", "1", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Wait for the port with plain dials: go-redis would log each refusal.
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return 0, errors.New("redis-server under valgrind did not listen within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	runErr := w.run(ctx, c, jobs)
	// A client of its own that does not retry: the connection closes
	// with the server, which would have c dial again, and log it.
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	_ = admin.Do(ctx, "SHUTDOWN", "NOSAVE").Err() // the connection closes: an error
	_ = admin.Close()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return 0, errors.New("redis-server under valgrind did not exit within 60s of SHUTDOWN")
	}
	if runErr != nil {
		return 0, runErr
	}
	return totalInstructions(out)
}

// totalInstructions reads the event total of a callgrind output file.
func totalInstructions(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "totals: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no summary line", path)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var payload = []byte(strings.Repeat("x", 64))

func asynqEnqueue(ctx context.Context, c *redis.Client, n int) error {
	ac := asynq.NewClientFromRedisClient(c)
	for i := 0; i < n; i++ {
		if _, err := ac.EnqueueContext(ctx, asynq.NewTask("noop", payload), asynq.Queue(queueName)); err != nil {
			return err
		}
	}
	return nil
}

func newProducer(c *redis.Client) (*queue.Producer, error) {
	pol := algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 1_000_000_000, Period: time.Second}
	return queue.NewProducer(c, &queue.Config{Queue: queueName, Bound: 1 << 40,
		Tenants: func(string) queue.TenantPolicy { return queue.TenantPolicy{Admission: &pol} }})
}

func key(kind string) string { return queue.DefaultPrefix + ":" + kind + ":{" + queueName + "}" }

func sluiceEnqueue(tenants int) func(context.Context, *redis.Client, int) error {
	return func(ctx context.Context, c *redis.Client, n int) error {
		p, err := newProducer(c)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if _, err := p.Enqueue(ctx, queue.Job{Tenant: fmt.Sprintf("t%d", i%tenants), Type: "noop", Payload: payload}); err != nil {
				return err
			}
		}
		return nil
	}
}

// sluiceClaim enqueues n jobs and hands them all over in claims of 20,
// as queue.Server's dispatcher does at Concurrency 10; between claims
// asynq's pending list is emptied, as busy workers would.
func sluiceClaim(tenants int) func(context.Context, *redis.Client, int) error {
	return func(ctx context.Context, c *redis.Client, n int) error {
		if err := sluiceEnqueue(tenants)(ctx, c, n); err != nil {
			return err
		}
		pending := "asynq:{" + queueName + "}:pending"
		handed := 0
		for handed < n {
			// KEYS and ARGV as queue_claim.lua lists them; see
			// queue.Server's dispatcher.
			v, err := scripts.QueueClaim.Run(ctx, c,
				[]string{key("ring"), key("sleep"), key("members"), key("weights"), key("turns"), key("meta"), key("cdepth"), key("ids"), pending, key("why")},
				20, queue.DefaultPrefix+":t:{"+queueName+"}:", "", 20, "0", "asynq:{"+queueName+"}:t:", "").Slice()
			if err != nil {
				return err
			}
			if len(v) < 2 || v[0] != int64(3) {
				return fmt.Errorf("claim answered %v after %d of %d jobs", v, handed, n)
			}
			handed += int(v[1].(int64))
			if err := c.Del(ctx, pending).Err(); err != nil {
				return err
			}
		}
		return nil
	}
}

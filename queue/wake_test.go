package queue

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// startQuiet starts a server on cfg whose process is quiet after 20 ms
// and then waits a minute without a message, and returns it once it is
// quiet, its dispatchers' last claims found nothing and its dequeues had
// time to park.
func startQuiet(t *testing.T, client redis.UniversalClient, cfg Config, h Handler) *Server {
	t.Helper()
	s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 16, PollInterval: 10 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.wake.after, s.wake.wait = 20*time.Millisecond, time.Minute
	if err := s.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	deadline := time.Now().Add(10 * time.Second)
	for !s.wake.quiet() || !s.disp[0].idle.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the server did not go quiet")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // past a dispatcher's last poll and asynq's short sleep
	return s
}

// TestIdleWorkerWakesForAJob: a quiet server, whose dispatcher and asynq
// servers would not look again for a minute, runs a job as soon as a
// producer adds it (the wake message), and a second one after it. On
// every target: the message is Redis pub/sub, on a cluster too.
func TestIdleWorkerWakesForAJob(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		ran := make(chan string, 4)
		startQuiet(t, client, cfg, HandlerFunc(func(ctx context.Context, job *Job) error {
			ran <- job.ID
			return nil
		}))
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"first", "second"} {
			if _, err := p.Enqueue(context.Background(), Job{ID: id, Tenant: "acme", Type: "x"}); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-ran:
				if got != id {
					t.Fatalf("ran %q, want %q", got, id)
				}
			case <-time.After(30 * time.Second): // half the quiet server's own wait
				t.Fatalf("job %s did not run: the quiet server was not woken", id)
			}
			time.Sleep(100 * time.Millisecond) // quiet again
		}
	})
}

// TestQuietServerCostsLittle: a quiet server of four asynq servers and
// four shards runs almost no script while nothing happens. Polling, its
// four claims and four dequeues every 10 ms ran 800 a second; quiet, a
// second has none but the background loops' few.
func TestQuietServerCostsLittle(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client(t)
	cfg := testConfig(t, 100)
	cfg.Shards = 4
	startQuiet(t, client, cfg, HandlerFunc(func(ctx context.Context, job *Job) error { return nil }))
	ctx := context.Background()
	calls := func() int64 {
		info, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, name := range []string{"evalsha", "eval"} {
			n += commandCalls(info, name)
		}
		return n
	}
	before := calls()
	time.Sleep(time.Second)
	if n := calls() - before; n > 20 {
		t.Errorf("a quiet server ran %d scripts in a second, want at most 20 (asynq's background loops)", n)
	}
}

// commandCalls reads the calls of a command from INFO commandstats.
func commandCalls(info, name string) int64 {
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			return n
		}
	}
	return 0
}

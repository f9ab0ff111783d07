package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue/policy"
)

// fleetPolicy writes a policy of one downstream at rate a second for
// queue into dir, and returns its path.
func fleetPolicyFile(t *testing.T, dir, queue string, rate int) string {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("policy-%d.yaml", rate))
	text := fmt.Sprintf("queue:\n  name: %s\n  bound: 100\ndownstreams:\n  api:\n    rate: %d\n    concurrency: 4\n", queue, rate)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fleetWorker is a worker of a fleet test, run until stop or the test's
// end.
type fleetWorker struct {
	w    *Worker
	log  *syncBuffer
	reg  *prometheus.Registry
	stop func()
}

func startFleetWorker(t *testing.T, client redis.UniversalClient, policyFile string) *fleetWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fleetWorker{log: &syncBuffer{}, reg: prometheus.NewRegistry()}
	f.w, err = New(&Config{PolicyFile: policyFile, Redis: client, Listener: ln, Registry: f.reg, Concurrency: 2,
		Logger: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx) }()
	stopped := false
	f.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v\n%s", err, f.log.String())
		}
	}
	t.Cleanup(f.stop)
	waitUntil(t, 20*time.Second, "the worker to start", func() bool { return strings.Contains(f.log.String(), "sluice worker started") })
	return f
}

// rate is the rate a second the worker paces downstream api at.
func (f *fleetWorker) rate() float64 {
	lim := f.w.state.Load().bound["api"].Limit
	return float64(lim.Rate) / lim.Per.Seconds()
}

// gap books two slots in a row on a fresh key at the worker's limits
// for api, on Redis, and returns how far apart Redis put them: the
// interval of the rate the worker paces at, less the moment between the
// two bookings.
func (f *fleetWorker) gap(t *testing.T) time.Duration {
	t.Helper()
	ctx := context.Background()
	lim := f.w.state.Load().bound["api"].Limit
	key := "gap-" + randomSuffix()
	r1, err := f.w.th.Reserve(ctx, key, lim, 1)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.w.th.Reserve(ctx, key, lim, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r2.Delay - r1.Delay
}

// TestStricterPolicyBindsTheFleet: a worker at 10 calls a second and one
// at 5 on one queue both pace the downstream at 5 (and its concurrency
// at the lower cap) from the moment the second starts; the first says
// so in a WARN line naming the difference, and sluice_policy_fingerprints
// reads 2. Once the stricter worker stops, the first paces at its own 10
// again and says the fleet agrees.
func TestStricterPolicyBindsTheFleet(t *testing.T) {
	for _, tg := range redistest.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			client := tg.Client(t)
			queue := strings.Trim(redistest.KeyPrefix(t), ":")
			dir := t.TempDir()
			fast := startFleetWorker(t, client, fleetPolicyFile(t, dir, queue, 10))
			if got := fast.rate(); got != 10 {
				t.Fatalf("alone, the worker paces at %v a second, want its own 10", got)
			}
			if g := fast.gap(t); g > 100*time.Millisecond || g < 50*time.Millisecond {
				t.Fatalf("alone, two slots %v apart, want 100 ms less the time between them", g)
			}
			slowFile := filepath.Join(dir, "slow.yaml")
			text, _ := os.ReadFile(fleetPolicyFile(t, dir, queue, 5))
			os.WriteFile(slowFile, []byte(strings.Replace(string(text), "concurrency: 4", "concurrency: 2", 1)), 0o644)
			slow := startFleetWorker(t, client, slowFile)
			if got := slow.rate(); got != 5 {
				t.Errorf("the new worker paces at %v a second, want its own 5", got)
			}
			// The first worker hears of the second by pub/sub, within a
			// round trip; the beat (5 s) would do it too.
			waitUntil(t, 4*time.Second, "the fast worker bound to 5 a second", func() bool { return fast.rate() == 5 })
			if g := fast.gap(t); g <= 150*time.Millisecond || g > 200*time.Millisecond {
				t.Errorf("bound, the fast worker's two slots are %v apart, want 200 ms less the time between them", g)
			}
			if c := fast.w.state.Load().bound["api"].Concurrency; c == nil || c.Max != 2 {
				t.Errorf("bound, the fast worker's concurrency cap is %+v, want 2", c)
			}
			waitUntil(t, 4*time.Second, "the WARN line", func() bool { return strings.Contains(fast.log.String(), "run another policy") })
			if log := fast.log.String(); !strings.Contains(log, "downstreams.api: rate 10/1s, burst 1, concurrency 4 here, rate 5/1s, burst 1, concurrency 2 there") {
				t.Errorf("the WARN line does not name the difference:\n%s", log)
			}
			rec := httptest.NewRecorder()
			fast.w.servePage(rec, httptest.NewRequest("GET", "/", nil))
			for _, want := range []string{"The live workers run 2 policies", "paced at rate 5/1s, burst 1, concurrency 2",
				"downstreams.api: rate 10/1s, burst 1, concurrency 4 here, rate 5/1s, burst 1, concurrency 2 there"} {
				if !strings.Contains(rec.Body.String(), want) {
					t.Errorf("the page does not say %q:\n%s", want, rec.Body.String())
				}
			}
			for _, f := range []*fleetWorker{fast, slow} {
				if n := testutil.ToFloat64(gauge(t, f.reg, "sluice_policy_fingerprints")); n != 2 {
					t.Errorf("sluice_policy_fingerprints %v, want 2", n)
				}
			}
			slow.stop()
			waitUntil(t, 4*time.Second, "the fast worker back at 10 a second", func() bool { return fast.rate() == 10 })
			waitUntil(t, 4*time.Second, "the agreement logged", func() bool { return strings.Contains(fast.log.String(), "agree on one policy again") })
			if g := fast.gap(t); g > 100*time.Millisecond {
				t.Errorf("alone again, two slots %v apart, want 100 ms less the time between them", g)
			}
		})
	}
}

// gauge finds a gauge of reg by name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "copy"}, func() float64 { return mf.GetMetric()[0].GetGauge().GetValue() })
		}
	}
	t.Fatalf("no gauge %s", name)
	return nil
}

// TestReloadChangesThePace: ReloadFile (SIGHUP) of a file at 5 calls a
// second makes a worker at 10 pace at 5; a file with mistakes is refused
// with each problem logged on its line, and the pace stays; a file that
// changes the queue section is refused as needing a restart.
func TestReloadChangesThePace(t *testing.T) {
	client := redistest.Shared(t)
	queue := strings.Trim(redistest.KeyPrefix(t), ":")
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	copyFile := func(from string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(fleetPolicyFile(t, dir, queue, 10))
	f := startFleetWorker(t, client, file)
	ctx := context.Background()
	fp := f.w.state.Load().fp

	copyFile(fleetPolicyFile(t, dir, queue, 5))
	if err := f.w.ReloadFile(ctx); err != nil {
		t.Fatalf("reload: %v\n%s", err, f.log.String())
	}
	if got := f.rate(); got != 5 {
		t.Fatalf("reloaded, the worker paces at %v a second, want 5", got)
	}
	if g := f.gap(t); g <= 150*time.Millisecond || g > 200*time.Millisecond {
		t.Errorf("reloaded, two slots %v apart, want 200 ms less the time between them", g)
	}
	if f.w.state.Load().fp == fp {
		t.Error("the fingerprint did not change with the rate")
	}

	os.WriteFile(file, []byte("queue:\n  name: "+queue+"\n  bound: 100\ndownstreams:\n  api:\n    rate: 0\n    burts: 3\n"), 0o644)
	err := f.w.ReloadFile(ctx)
	var list policy.ErrorList
	if !errorsAs(err, &list) || len(list) != 2 {
		t.Fatalf("a bad file: %v; want its two problems", err)
	}
	log := f.log.String()
	for _, want := range []string{"policy.yaml:6:11: downstreams.api.rate", "policy.yaml:7:5: downstreams.api.burts", "reload refused; the running policy stands"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if got := f.rate(); got != 5 {
		t.Errorf("after a refused reload the worker paces at %v a second, want the running 5", got)
	}

	os.WriteFile(file, []byte("queue:\n  name: "+queue+"\n  bound: 200\ndownstreams:\n  api:\n    rate: 1\n"), 0o644)
	if err := f.w.ReloadFile(ctx); err == nil || !strings.Contains(err.Error(), "queue section needs a restart") {
		t.Errorf("a changed queue section: %v; want it refused as needing a restart", err)
	}
	if got := f.rate(); got != 5 {
		t.Errorf("after a refused reload the worker paces at %v a second, want the running 5", got)
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

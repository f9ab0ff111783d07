package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// TestHandlersRefusalPausesTheFleet: a handler of the user's own (no
// downstream.Transport) that returns Refused on its downstream's 429
// pauses the key fleet-wide for the refusal's time, as the built-in HTTP
// job's Transport does: the throttle's state for the key (what every
// worker reads) shows the pause.
func TestHandlersRefusalPausesTheFleet(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 100)
		ctx := context.Background()
		th := testThrottle(t, client, nil)
		lim := throttle.Limit{Name: "crm", Rate: 100, MaxWait: time.Second}
		d := Downstream{Name: "crm", Limit: lim}
		var refusals atomic.Int64
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "crm" }},
			handlerFunc(func(ctx context.Context, job *Job) error {
				refusals.Add(1)
				return Refused(2*time.Minute, "HTTP 429 from the CRM")
			}))
		if _, err := p.Enqueue(ctx, Job{Tenant: "acme", Type: "crm.sync", Downstream: "crm"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the handler's refusal", func() bool { return refusals.Load() == 1 })
		waitFor(t, 30*time.Second, "the job back in the waiting room", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && st.Depth == 1 && st.HandedOver == 0
		})
		st, err := th.State(ctx, "crm", lim)
		if err != nil {
			t.Fatal(err)
		}
		if paused := st.Paused(); paused < 110*time.Second || paused > 2*time.Minute {
			t.Fatalf("the key is paused for %v after a handler's Refused of 2m; want about 2m", paused)
		}
	})
}

package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/queue/policy"
)

// TestSchedulerMissedOnlyWhenSkipped: a worker that starts counts no
// tick missed for the ticks within catch_up before the latest (they were
// other workers', or no worker's before it: it rose by 59 on every start
// of a schedule of every 1s with catch_up 1m); ticks it passes over once
// running are missed, and the page's status says what the last tick
// came to and which is next.
func TestSchedulerMissedOnlyWhenSkipped(t *testing.T) {
	cfg, err := policy.Parse([]byte("queue: {bound: 10}\nschedules:\n  beat: {every: 1s, tenant: a, catch_up: 1m, job: {type: ping}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ticks, err := newTickCounter(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 3, 0, 0, 500e6, time.UTC)
	var got []time.Time
	s := newScheduler(tickFunc(func(tick time.Time) { got = append(got, tick) }), cfg.Schedules,
		func() time.Time { return at }, slog.New(slog.NewTextHandler(io.Discard, nil)), ticks)
	if st := s.status(); st[0].Next != at.Truncate(time.Second).Add(time.Second) || !st[0].Last.Tick.IsZero() {
		t.Errorf("before the first step: %+v; want the next whole second and no last tick", st[0])
	}
	s.step(context.Background())
	if missed := testutil.ToFloat64(ticks.WithLabelValues("beat", tickMissed)); missed != 0 {
		t.Errorf("after the first step, %v ticks missed; want 0", missed)
	}
	if len(got) != 1 || !got[0].Equal(at.Truncate(time.Second)) {
		t.Fatalf("the first step enqueued %v; want the latest tick only, %v", got, at.Truncate(time.Second))
	}
	at = at.Add(3 * time.Second) // three ticks later: two passed over
	s.step(context.Background())
	if missed := testutil.ToFloat64(ticks.WithLabelValues("beat", tickMissed)); missed != 2 {
		t.Errorf("after three ticks in one step, %v missed; want 2", missed)
	}
	st := s.status()[0]
	if want := at.Truncate(time.Second); !st.Last.Tick.Equal(want) || st.Last.Result != tickEnqueued || !st.Next.Equal(want.Add(time.Second)) {
		t.Errorf("status %+v; want the last tick %v enqueued, the next a second later", st, want)
	}
	if st.Spec != "every 1s" || st.Tenant != "a" {
		t.Errorf("status %+v; want every 1s for tenant a", st)
	}
}

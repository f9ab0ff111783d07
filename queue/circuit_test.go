package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

// TestDownstreamFailed: the one classification the circuits use.
func TestDownstreamFailed(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a plain error", errors.New("bad payload"), false},
		{"marked by Failed", Failed(errors.New("HTTP 500")), true},
		{"Failed wrapped", fmt.Errorf("job x: %w", Failed(errors.New("HTTP 502"))), true},
		{"connection refused", fmt.Errorf("job x: %w", refused), true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"cut short", io.ErrUnexpectedEOF, true},
		{"the call's deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), true},
		{"no such host", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, true},
		{"a url.Error around a dial", &url.Error{Op: "Post", URL: "http://x", Err: refused}, true},
		{"a url.Error around a refusal of sluice's", &url.Error{Op: "Post", URL: "http://x", Err: &throttle.TooFarError{RetryAfter: time.Second}}, false},
		{"cancelled", fmt.Errorf("post: %w", context.Canceled), false},
		{"sluice's slot too far", &throttle.TooFarError{RetryAfter: time.Second}, false},
		{"Redis unreachable", fmt.Errorf("%w: dial", throttle.ErrUnavailable), false},
		{"a reschedule", Reschedule(time.Second, "later"), false},
		{"a refusal", Refused(time.Second, "HTTP 429"), false},
		{"permanent", Permanent(errors.New("HTTP 400")), false},
	} {
		if got := DownstreamFailed(c.err); got != c.want {
			t.Errorf("%s: DownstreamFailed(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if Failed(nil) != nil {
		t.Error("Failed(nil) is not nil")
	}
}

// TestCircuitOpensOnFailingHost: jobs of one downstream whose host
// refuses connections, one at a time: the fifth failure opens the
// circuit, and the five jobs left wait in the waiting room, uncalled,
// with no retry spent; a second worker's throttle hears of the open
// circuit from its first failure.
func TestCircuitOpensOnFailingHost(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 1000)
		ctx := context.Background()
		for i := range 10 {
			if _, err := p.Enqueue(ctx, Job{Tenant: fmt.Sprint("t", i), Type: "x", Downstream: "down", MaxRetry: 1}); err != nil {
				t.Fatal(err)
			}
		}
		prefix := redistest.KeyPrefix(t) + "th"
		th, err := throttle.New(client, &throttle.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { th.Close() })
		d := Downstream{Name: "down", Limit: throttle.Limit{Name: "down", Rate: 1000}, Circuit: throttle.Circuit{Cooldown: time.Hour}}
		var calls atomic.Int64
		refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "down" }},
			handlerFunc(func(ctx context.Context, job *Job) error {
				calls.Add(1)
				return fmt.Errorf("post: %w", refused)
			}))
		waitFor(t, 60*time.Second, "five jobs left in the waiting room", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && st.Depth == 5 && st.HandedOver == 0
		})
		if n := calls.Load(); n != 5 {
			t.Fatalf("%d calls to a host whose circuit opened after 5", n)
		}
		if st := th.Circuits(); len(st) != 1 || st[0].State != throttle.CircuitOpen || st[0].Name != "down" {
			t.Fatalf("circuits: %+v", st)
		}
		if n := testutil.ToFloat64(srv.metrics.circuitWaits.WithLabelValues("down")); n < 1 {
			t.Fatalf("sluice_queue_circuit_waits_total = %v", n)
		}
		other, err := throttle.New(client, &throttle.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		other2 := throttle.Circuit{Name: "down"}
		if err := other.CircuitReport(ctx, "down", other2, true); err != nil {
			t.Fatal(err)
		}
		if w, err := other.CircuitWait(ctx, "down", other2); err != nil || w < 30*time.Minute {
			t.Fatalf("the other worker's wait: %v, %v; want the hour's cool-down", w, err)
		}
	})
}

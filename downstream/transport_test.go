package downstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/throttle"
)

func newThrottle(t *testing.T) *throttle.Throttle {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	th, err := throttle.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.Close() })
	return th
}

// TestTransportPacesAndPauses: requests leave no earlier than their slots,
// one interval apart, a 429 with Retry-After pauses the key, and the next
// request is refused a slot within its allowed wait.
func TestTransportPacesAndPauses(t *testing.T) {
	fake := downstreamtest.NewServer(downstreamtest.Config{Rate: 1000})
	defer fake.Close()
	th := newThrottle(t)
	tr := &Transport{Throttle: th, Limit: throttle.Limit{Name: "api", Rate: 20, MaxWait: time.Second}}
	client := &http.Client{Transport: tr}
	// The slots are start, start+50ms, ... (miniredis's TIME is this
	// host's clock). A request delayed by the scheduler may arrive close
	// to the next one, so the check is against the schedule, not the gaps.
	start := time.Now()
	for i := 0; i < 5; i++ {
		resp, err := client.Get(fake.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i, at := range fake.Arrivals() {
		if early := start.Add(time.Duration(i) * 50 * time.Millisecond).Sub(at); early > time.Millisecond {
			t.Fatalf("request %d arrived %v before its slot; the limit is 20/s (50ms)", i, early)
		}
	}
	fake.SetFault(downstreamtest.Fault429Seconds(30))
	resp, err := client.Get(fake.URL() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	resp, err = client.Get(fake.URL() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var far *throttle.TooFarError
	if !errors.As(OwnRefusal(resp), &far) || far.Paused < 29*time.Second || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after a 429 with Retry-After 30: %d, %v; want a 429 of sluice's for a TooFarError from a 30s pause", resp.StatusCode, OwnRefusal(resp))
	}
	if n := fake.Counts().Total; n != 6 {
		t.Fatalf("the downstream saw %d calls, want 6: none during the pause", n)
	}
}

func TestTransportConcurrencyReleasedOnClose(t *testing.T) {
	fake := downstreamtest.NewServer(downstreamtest.Config{})
	defer fake.Close()
	th := newThrottle(t)
	// MaxWait -1: a request that finds the slot leased does not wait; a
	// burst of 10 keeps its pace slot due now, so that the lease decides.
	tr := &Transport{Throttle: th, Limit: throttle.Limit{Rate: 1000, Burst: 10, MaxWait: throttle.NoWait}, Concurrency: &throttle.Concurrency{Max: 1, Lease: time.Minute}}
	client := &http.Client{Transport: tr}
	resp, err := client.Get(fake.URL())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := client.Get(fake.URL()); err != nil || !errors.Is(OwnRefusal(r), throttle.ErrBusy) {
		t.Fatalf("second request while the first body is open: %v; want busy", err)
	}
	// A request that may wait gets the slot as soon as the first body is
	// closed, long before the lease would run out.
	waiting := &http.Client{Transport: &Transport{Throttle: th, Limit: throttle.Limit{Rate: 1000, MaxWait: time.Minute},
		Concurrency: &throttle.Concurrency{Max: 1, Lease: time.Minute}}}
	got := make(chan error, 1)
	go func() {
		r, err := waiting.Get(fake.URL())
		if err == nil {
			r.Body.Close()
		}
		got <- err
	}()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := <-got; err != nil {
		t.Fatalf("the waiting request: %v", err)
	}
	resp, err = waiting.Get(fake.URL())
	if err != nil {
		t.Fatalf("after closing the bodies: %v", err)
	}
	resp.Body.Close()
}

// TestTransportHoldsNoLeaseWhileSleeping: a request that sleeps through a
// pause for its slot holds no lease meanwhile; it takes one when its slot
// comes, and gives it back when its body is closed.
func TestTransportHoldsNoLeaseWhileSleeping(t *testing.T) {
	fake := downstreamtest.NewServer(downstreamtest.Config{})
	defer fake.Close()
	th := newThrottle(t)
	ctx := context.Background()
	lim := throttle.Limit{Name: "api", Rate: 1000, MaxWait: 10 * time.Second}
	tr := &Transport{Throttle: th, Limit: lim, Concurrency: &throttle.Concurrency{Max: 1, Lease: time.Minute},
		Key: func(*http.Request) string { return "api" }}
	const pause = 400 * time.Millisecond
	if _, err := th.Pause(ctx, "api", lim, pause); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Get(fake.URL())
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	for time.Since(paused) < pause-100*time.Millisecond {
		if n, err := th.InUse(ctx, "api"); err != nil || n != 0 {
			t.Fatalf("%d leases held (%v) while the request sleeps through the pause", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp := <-got
	if resp == nil {
		t.FailNow()
	}
	if n, err := th.InUse(ctx, "api"); err != nil || n != 1 {
		t.Fatalf("%d leases held (%v) while the body is open; want 1", n, err)
	}
	resp.Body.Close()
	if n, err := th.InUse(ctx, "api"); err != nil || n != 0 {
		t.Fatalf("%d leases held (%v) after the body was closed", n, err)
	}
}

// TestTransportKeepsLeaseForLongCalls: requests four times longer than
// the lease never exceed the cap at the API: the lease is extended while
// the request runs.
func TestTransportKeepsLeaseForLongCalls(t *testing.T) {
	fake := downstreamtest.NewServer(downstreamtest.Config{Latency: 600 * time.Millisecond})
	defer fake.Close()
	th := newThrottle(t)
	tr := &Transport{Throttle: th, Limit: throttle.Limit{Rate: 1000, MaxWait: 10 * time.Second},
		Concurrency: &throttle.Concurrency{Max: 1, Lease: 150 * time.Millisecond}}
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			resp, err := (&http.Client{Transport: tr}).Get(fake.URL())
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if c := fake.Counts(); c.MaxInFlight != 1 || c.OK != 3 {
		t.Fatalf("the API saw %d calls in flight under a cap of 1 (%+v)", c.MaxInFlight, c)
	}
}

// TestTransportOwnPause: a request marked WithOwnPause that is refused
// (429, Retry-After 30) does not pause the key: the next request of
// another caller goes at once. Unmarked, the same refusal pauses it.
func TestTransportOwnPause(t *testing.T) {
	fake := downstreamtest.NewServer(downstreamtest.Config{Rate: 1000})
	defer fake.Close()
	th := newThrottle(t)
	tr := &Transport{Throttle: th, Limit: throttle.Limit{Name: "api", Rate: 100, MaxWait: time.Second}}
	get := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fake.URL()+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	fake.SetFault(downstreamtest.Fault429Seconds(30))
	resp, err := get(WithOwnPause(context.Background()))
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the refused request: %v, %v", resp, err)
	}
	fake.SetFault(downstreamtest.FaultNone)
	if resp, err := get(context.Background()); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("another caller after a refusal of its own: %v, %v; want it sent at once", resp, err)
	}
	fake.SetFault(downstreamtest.Fault429Seconds(30))
	if _, err := get(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.SetFault(downstreamtest.FaultNone)
	var far *throttle.TooFarError
	if resp, err := get(context.Background()); err != nil || !errors.As(OwnRefusal(resp), &far) {
		t.Fatalf("after an unmarked refusal: %v; want the key paused", err)
	}
}

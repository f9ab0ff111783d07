package downstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
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
	fake := NewFakeServer(FakeConfig{Rate: 1000})
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
	fake.SetFault(Fault429Seconds(30))
	resp, err := client.Get(fake.URL() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	_, err = client.Get(fake.URL() + "/x")
	var far *throttle.TooFarError
	if !errors.As(err, &far) || far.Paused < 29*time.Second {
		t.Fatalf("after a 429 with Retry-After 30: %v; want a TooFarError from a 30s pause", err)
	}
	if n := fake.Counts().Total; n != 6 {
		t.Fatalf("the downstream saw %d calls, want 6: none during the pause", n)
	}
}

func TestTransportConcurrencyReleasedOnClose(t *testing.T) {
	fake := NewFakeServer(FakeConfig{})
	defer fake.Close()
	th := newThrottle(t)
	tr := &Transport{Throttle: th, Limit: throttle.Limit{Rate: 1000}, Concurrency: &throttle.Concurrency{Max: 1, Lease: time.Minute}}
	client := &http.Client{Transport: tr}
	resp, err := client.Get(fake.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(fake.URL()); !errors.Is(err, throttle.ErrBusy) {
		t.Fatalf("second request while the first body is open: %v; want busy", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = client.Get(fake.URL())
	if err != nil {
		t.Fatalf("after closing the first body: %v", err)
	}
	resp.Body.Close()
}

func TestHTTPJobOutcomes(t *testing.T) {
	th := newThrottle(t)
	var status int
	var header http.Header
	srv := NewFakeServer(FakeConfig{})
	defer srv.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		io.WriteString(w, "answer body")
	})
	api := httptestServer(t, mux)
	base, _ := url.Parse(api + "/v1/")
	job := &HTTPJob{Throttle: th, Resolve: func(j *queue.Job, raw string) (HTTPTarget, error) {
		u, err := url.Parse(raw)
		if err != nil || u.Host != base.Host || !strings.HasPrefix(u.Path, base.Path) {
			return HTTPTarget{}, errors.New("url outside the downstream's base URL")
		}
		return HTTPTarget{Limit: throttle.Limit{Name: "api", Rate: 100}}, nil
	}}
	run := func(payload string) error {
		return job.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: "t", Type: HTTPJobType, Downstream: "api", Payload: []byte(payload)})
	}
	ok := `{"method":"POST","url":"` + api + `/v1/orders","body":"x"}`
	for _, c := range []struct {
		status  int
		header  http.Header
		payload string
		check   func(error) bool
		want    string
	}{
		{200, nil, ok, func(err error) bool { return err == nil }, "done"},
		{204, nil, ok, func(err error) bool { return err == nil }, "done"},
		{429, http.Header{"Retry-After": {"7"}}, ok, func(err error) bool {
			var re *queue.RescheduleError
			return errors.As(err, &re) && re.After == 7*time.Second
		}, "rescheduled for Retry-After"},
		{503, nil, ok, func(err error) bool {
			var re *queue.RescheduleError
			return errors.As(err, &re) && re.After == DefaultBackoff
		}, "rescheduled after the default backoff"},
		{500, nil, ok, func(err error) bool {
			var re *queue.RescheduleError
			return err != nil && !errors.As(err, &re) && !strings.Contains(err.Error(), "answer body")
		}, "a retryable error"},
		{404, nil, ok, func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "HTTP 404") && strings.Contains(err.Error(), "answer body")
		}, "archived with the body"},
		{200, nil, `{"url":"http://evil.example/x"}`, func(err error) bool { return err != nil && strings.Contains(err.Error(), "outside") }, "refused URL"},
		{200, nil, `not json`, func(err error) bool { return err != nil && strings.Contains(err.Error(), "payload") }, "bad payload"},
	} {
		status, header = c.status, c.header
		if err := run(c.payload); !c.check(err) {
			t.Errorf("HTTP %d, payload %.40s: got %v; want %s", c.status, c.payload, err, c.want)
		}
	}
}

// TestHTTPJobIdempotencyKey: the job's id goes out as Idempotency-Key,
// the same on every run of the job, unless the payload overrides it or
// turns it off.
func TestHTTPJobIdempotencyKey(t *testing.T) {
	th := newThrottle(t)
	got := make(chan []string, 1)
	api := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values(IdempotencyHeader)
	}))
	job := &HTTPJob{Throttle: th, Resolve: func(*queue.Job, string) (HTTPTarget, error) {
		return HTTPTarget{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	for _, c := range []struct {
		header string
		want   []string
	}{
		{``, []string{"job-7"}},
		{`,"header":{"X-Other":"1"}`, []string{"job-7"}},
		{`,"header":{"idempotency-key":"mine"}`, []string{"mine"}},
		{`,"header":{"Idempotency-Key":""}`, nil},
	} {
		payload := `{"method":"POST","url":"` + api + `/x"` + c.header + `}`
		for range 2 { // a job run twice sends the same key
			if err := job.ProcessJob(context.Background(), &queue.Job{ID: "job-7", Tenant: "t", Type: HTTPJobType, Downstream: "api", Payload: []byte(payload)}); err != nil {
				t.Fatalf("%s: %v", payload, err)
			}
			if v := <-got; !slices.Equal(v, c.want) {
				t.Errorf("%s: Idempotency-Key %q, want %q", payload, v, c.want)
			}
		}
	}
}

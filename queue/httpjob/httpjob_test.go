package httpjob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestMain fails the run when a request or a pause left a goroutine
// running after the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// httptestServer serves h on loopback for the test and returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func TestOutcomes(t *testing.T) {
	th := newThrottle(t)
	var status int
	var header http.Header
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
	job := &Handler{Throttle: th, Resolve: func(j *queue.Job, raw string) (queue.Downstream, error) {
		u, err := url.Parse(raw)
		if err != nil || u.Host != base.Host || !strings.HasPrefix(u.Path, base.Path) {
			return queue.Downstream{}, errors.New("url outside the downstream's base URL")
		}
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 100}}, nil
	}}
	run := func(payload string) error {
		// With the slot the worker would have booked: the call books none.
		ctx := queue.WithReservation(context.Background(), th, throttle.Reservation{OK: true})
		return job.ProcessJob(ctx, &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api", Payload: []byte(payload)})
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
		{429, http.Header{"Stripe-Rate-Limited-Reason": {"global-concurrency"}}, ok, func(err error) bool {
			var re *queue.RescheduleError
			return errors.As(err, &re) && re.After == downstream.ConcurrencyBackoff && !re.Refused
		}, "rescheduled after the short back-off of too many calls in flight, no refusal"},
		{529, nil, ok, func(err error) bool {
			var re *queue.RescheduleError
			return errors.As(err, &re) && re.After == downstream.DefaultBackoff && re.Refused
		}, "an overload: rescheduled after the default backoff, a refusal"},
		{429, http.Header{"Retry-After": {"7"}}, ok, func(err error) bool {
			var re *queue.RescheduleError
			return errors.As(err, &re) && re.After == 7*time.Second && re.Refused
		}, "rescheduled for Retry-After, a refusal"},
		{503, nil, ok, func(err error) bool {
			var re *queue.RescheduleError
			return errors.As(err, &re) && re.After == downstream.DefaultBackoff && re.Refused
		}, "rescheduled after the default backoff, a refusal"},
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

// TestIdempotencyKey: the job's id, scoped by its tenant, goes out as
// Idempotency-Key, the same on every run of the job; a key the payload
// gives goes out scoped by the tenant too, or none for ""; another
// tenant's job of the same id sends another key (mallory's order-42 never
// passes for alice's), and so does another tenant's payload that names
// alice's key.
func TestIdempotencyKey(t *testing.T) {
	th := newThrottle(t)
	got := make(chan []string, 1)
	api := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values(IdempotencyHeader)
	}))
	job := &Handler{Throttle: th, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	for _, c := range []struct {
		header string
		want   []string
	}{
		{``, []string{"=t/job-7"}},
		{`,"header":{"X-Other":"1"}`, []string{"=t/job-7"}},
		{`,"header":{"idempotency-key":"mine"}`, []string{"=t/mine"}},
		{`,"header":{"Idempotency-Key":"=alice/order-42"}`, []string{"=t/=alice/order-42"}},
		{`,"header":{"Idempotency-Key":""}`, nil},
	} {
		payload := `{"method":"POST","url":"` + api + `/x"` + c.header + `}`
		for range 2 { // a job run twice sends the same key
			if err := job.ProcessJob(context.Background(), &queue.Job{ID: "job-7", Tenant: "t", Type: Type, Downstream: "api", Payload: []byte(payload)}); err != nil {
				t.Fatalf("%s: %v", payload, err)
			}
			if v := <-got; !slices.Equal(v, c.want) {
				t.Errorf("%s: Idempotency-Key %q, want %q", payload, v, c.want)
			}
		}
	}
	plain := `{"method":"POST","url":"` + api + `/x"}`
	// Mallory names alice's key in her payload, in any case.
	borrowed := `{"method":"POST","url":"` + api + `/x","header":{"Idempotency-Key":"=alice/order-42"}}`
	for _, c := range []struct{ tenant, payload, want string }{
		{"mallory", plain, "=mallory/order-42"},
		{"alice", plain, "=alice/order-42"},
		{"mallory", borrowed, "=mallory/=alice/order-42"},
		{"mallory", strings.Replace(borrowed, "Idempotency-Key", "IDEMPOTENCY-KEY", 1), "=mallory/=alice/order-42"},
		// Not a verbatim key name: hashed, still a header-safe value.
		{"alice:x", plain, "#" + hex256("alice:x") + "/order-42"},
		{"alice:x", borrowed, "#" + hex256("alice:x") + "/=alice/order-42"},
	} {
		if err := job.ProcessJob(context.Background(), &queue.Job{ID: "order-42", Tenant: c.tenant, Type: Type, Downstream: "api", Payload: []byte(c.payload)}); err != nil {
			t.Fatal(err)
		}
		if v := <-got; !slices.Equal(v, []string{c.want}) {
			t.Errorf("tenant %q, %s: Idempotency-Key %q, want %q", c.tenant, c.payload, v, c.want)
		}
	}
}

// hex256 is the hex SHA-256 of s.
func hex256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestTargetHeader: the downstream's own headers (its credentials, from
// the policy file) go out on every request, over a job's header of the
// same name; the job's other headers go out too.
func TestTargetHeader(t *testing.T) {
	th := newThrottle(t)
	got := make(chan http.Header, 1)
	api := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	job := &Handler{Throttle: th, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}, Headers: map[string]string{"Authorization": "Bearer policy", "X-Api-Key": "k"}}, nil
	}}
	for _, payload := range []string{
		`{"url":"` + api + `/x","header":{"X-Other":"1"}}`,
		`{"url":"` + api + `/x","header":{"authorization":"Bearer job","X-Other":"1"}}`,
	} {
		if err := job.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api", Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
		h := <-got
		if !slices.Equal(h.Values("Authorization"), []string{"Bearer policy"}) || h.Get("X-Api-Key") != "k" || h.Get("X-Other") != "1" {
			t.Errorf("%s: headers %q; want the policy's Authorization and X-Api-Key, and the job's X-Other", payload, h)
		}
	}
}

// TestRedact: the values of secret header fields, in any case, are
// replaced; other fields, and payloads without secrets or that are no
// request, are kept.
func TestRedact(t *testing.T) {
	in := `{"method":"POST","url":"https://a.com/x","header":{"authorization":"Bearer s3cret","Cookie":"sid=s3cret","PROXY-AUTHORIZATION":"Basic s3cret","x-api-key":"s3cret","X-Other":"visible"},"body":"b"}`
	out := string(Redact([]byte(in)))
	var req Request
	if err := json.Unmarshal([]byte(out), &req); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "s3cret") || req.Header["X-Other"] != "visible" || req.Header["authorization"] != Redacted || req.URL != "https://a.com/x" || req.Body != "b" {
		t.Fatalf("Redact: %s", out)
	}
	for _, keep := range []string{`{"url":"https://a.com/x","header":{"X-Other":"1"}}`, `not json`, `{"url":"https://a.com/x"}`} {
		if got := string(Redact([]byte(keep))); got != keep {
			t.Errorf("Redact(%s) = %s; want it as it is", keep, got)
		}
	}
}

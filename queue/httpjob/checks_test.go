package httpjob

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestHTTPJobURLErrorQuotesNoURL: a job URL that does not parse fails
// without its text in the error, which asynq stores and /monitoring/
// shows: net/url quotes what it took for a port, and that may be a
// password (issue 19, finding 5).
func TestHTTPJobURLErrorQuotesNoURL(t *testing.T) {
	const secret = "URLPASSWORD"
	job := &Handler{Throttle: newThrottle(t), Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	for _, raw := range []string{
		"http://127.0.0.1:18092:" + secret + "/x",
		"http://u:" + secret + "/x@127.0.0.1:18092/x",
		"http://127.0.0.1/%zz" + secret,
	} {
		err := job.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api",
			Payload: []byte(`{"url":"` + raw + `"}`)})
		if err == nil {
			t.Fatalf("%s: no error", raw)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes the URL: %v", err)
		}
	}
}

// TestHTTPJobRefusesWhatCannotBeSent: a method outside the ordinary set,
// or a header that net/http would refuse, fails without a call and
// without the header's name or value in the error (issue 19, finding 6);
// CheckRequest agrees. (The worker archives such a job at once:
// queue/worker's TestWorkerArchivesUnsendableJobs.)
func TestHTTPJobRefusesWhatCannotBeSent(t *testing.T) {
	var calls atomic.Int64
	api := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	job := &Handler{Throttle: newThrottle(t), Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	run := func(method string, header map[string]string) error {
		payload, _ := json.Marshal(Request{Method: method, URL: api + "/x", Header: header})
		return job.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api", Payload: payload})
	}
	for _, m := range downstream.HTTPMethods {
		if err := run(m, map[string]string{"X-Tab": "a\tb"}); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	if n := calls.Load(); n != int64(len(downstream.HTTPMethods)) {
		t.Fatalf("%d calls for the %d ordinary methods", n, len(downstream.HTTPMethods))
	}
	calls.Store(0)
	for _, c := range []struct {
		method string
		header map[string]string
		want   error
	}{
		{"TRACE", nil, downstream.ErrMethodNotAllowed},
		{"CONNECT", nil, downstream.ErrMethodNotAllowed},
		{"get", nil, downstream.ErrMethodNotAllowed},
		{"SECRET-METHOD", nil, downstream.ErrMethodNotAllowed},
		{"GET", map[string]string{"X Secret": "1"}, downstream.ErrHeaderName},
		{"GET", map[string]string{"X-Secret:": "1"}, downstream.ErrHeaderName},
		{"GET", map[string]string{"": "1"}, downstream.ErrHeaderName},
		{"GET", map[string]string{"X-Secret": "v\r\nX-Injected: 1"}, downstream.ErrHeaderValue},
		{"GET", map[string]string{"X-Secret": "secret\n"}, downstream.ErrHeaderValue},
		{"GET", map[string]string{"X-Secret": "secret\x00"}, downstream.ErrHeaderValue},
		{"GET", map[string]string{"X-Secret": "secret\x7f"}, downstream.ErrHeaderValue},
	} {
		if err := downstream.CheckRequest(c.method, c.header); !errors.Is(err, c.want) {
			t.Errorf("downstream.CheckRequest(%q, %q) = %v, want %v", c.method, c.header, err, c.want)
		}
		err := run(c.method, c.header)
		if err == nil || strings.Contains(strings.ToLower(err.Error()), "secret") {
			t.Errorf("%q %q: %v; want an error that names neither header nor value", c.method, c.header, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d of the unsendable requests reached the downstream", n)
	}
}

package httpjob

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// cannedBase answers every request with status and body, in memory.
type cannedBase struct {
	status int
	body   string
}

func (c cannedBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{StatusCode: c.status, Header: http.Header{"Content-Type": {"application/json"}, "Date": {"Fri, 27 Nov 2026 12:00:00 GMT"}},
		Body: io.NopCloser(strings.NewReader(c.body)), Request: req}, nil
}

// BenchmarkProcessJob is the handler's own work for a job whose call
// succeeds, net/http aside (its Base answers in memory).
func BenchmarkProcessJob(b *testing.B) {
	m := miniredis.RunT(b)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	th, err := throttle.New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer th.Close()
	for name, body := range map[string]string{"small": `{"ok":true}`, "4KB": strings.Repeat("x", 4096)} {
		h := &Handler{Throttle: th, Base: cannedBase{200, body}, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
			return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 100}}, nil
		}}
		job := &queue.Job{ID: "j1", Tenant: "tenant-1", Type: Type, Downstream: "api",
			Payload: []byte(`{"method":"POST","url":"http://127.0.0.1:8080/v1/orders","header":{"Content-Type":"application/json"},"body":"{\"n\":1}"}`)}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := h.ProcessJob(context.Background(), job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

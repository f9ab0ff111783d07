package httpjob

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// countingBody counts the bytes read from it.
type countingBody struct {
	io.Reader
	read int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *countingBody) Close() error { return nil }

// bodyBase answers 200 with body.
type bodyBase struct{ body io.ReadCloser }

func (b bodyBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: b.body, Request: req}, nil
}

func okHandler(t *testing.T, base http.RoundTripper) *Handler {
	return &Handler{Throttle: newThrottle(t), Base: base, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 100}}, nil
	}}
}

var okJob = &queue.Job{ID: "j1", Tenant: "t", Type: Type, Downstream: "api", Payload: []byte(`{"url":"http://127.0.0.1:9/x"}`)}

// TestSuccessBodyDrained: a success's body is read as far as it always
// was, 512 bytes and 1 MiB more (so that a keep-alive connection serves
// again after any body up to that length), and no further.
func TestSuccessBodyDrained(t *testing.T) {
	body := &countingBody{Reader: strings.NewReader(strings.Repeat("x", 2<<20))}
	if err := okHandler(t, bodyBase{body}).ProcessJob(context.Background(), okJob); err != nil {
		t.Fatal(err)
	}
	if want := int64(512 + 1<<20); body.read != want {
		t.Fatalf("read %d bytes of a 2 MiB body, want %d", body.read, want)
	}
}

// TestSuccessBodyNotKept: a success's body costs no allocation, whatever
// its length: it is drained, not copied.
func TestSuccessBodyNotKept(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector, sync.Pool (io.Discard's buffers) drops items at random")
	}
	allocs := func(size int) float64 {
		h := okHandler(t, cannedBase{200, strings.Repeat("x", size)})
		// The slot the worker would have booked: the call books no other.
		ctx := queue.WithReservation(context.Background(), h.Throttle, throttle.Reservation{OK: true})
		return testing.AllocsPerRun(50, func() {
			if err := h.ProcessJob(ctx, okJob); err != nil {
				t.Fatal(err)
			}
		})
	}
	if small, large := allocs(10), allocs(4096); large != small {
		t.Fatalf("a job whose call answers 4 KiB makes %.0f allocations, one that answers 10 bytes %.0f", large, small)
	}
}

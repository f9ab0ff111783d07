package downstream

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestHTTPJobURLErrorQuotesNoURL: a job URL that does not parse fails
// without its text in the error, which asynq stores and /monitoring/
// shows: net/url quotes what it took for a port, and that may be a
// password (issue 19, finding 5).
func TestHTTPJobURLErrorQuotesNoURL(t *testing.T) {
	const secret = "URLPASSWORD"
	job := &HTTPJob{Throttle: newThrottle(t), Resolve: func(*queue.Job, string) (HTTPTarget, error) {
		return HTTPTarget{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	for _, raw := range []string{
		"http://127.0.0.1:18092:" + secret + "/x",
		"http://u:" + secret + "/x@127.0.0.1:18092/x",
		"http://127.0.0.1/%zz" + secret,
	} {
		err := job.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: "t", Type: HTTPJobType, Downstream: "api",
			Payload: []byte(`{"url":"` + raw + `"}`)})
		if err == nil {
			t.Fatalf("%s: no error", raw)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes the URL: %v", err)
		}
	}
}

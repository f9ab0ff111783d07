package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
)

// TestWhyNamesTheBucket: the built binaries on a real redis-server, a
// downstream paced at one call per 4 s, and three jobs of one tenant. The
// first calls at once; `enqueue why` on each of the others names the
// downstream's bucket and says when the job should start. The test
// checks the answer's shape, and logs how far each estimate was from
// the calls' arrivals at the API (the target: within 1 s); the machine is
// shared, so the figure is reported, not asserted.
func TestWhyNamesTheBucket(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	a := newAPI(t, downstreamtest.Config{})
	f := newFleet(t, fmt.Sprintf(`queue:
  name: why
  bound: 100
downstreams:
  api:
    base_url: %s/api/
    rate: 1
    per: 4s
`, a.URL()), "-redis", "redis://"+srv.Addr()+"/0")
	f.start()
	ids := f.enqueueJobs([]string{a.jobLine("w1", "acme"), a.jobLine("w2", "acme"), a.jobLine("w3", "acme")})
	poll(t, 10*time.Second, func() bool { return a.delivered(ids[:1]) == 1 }, func() string { return "w1's call" })
	time.Sleep(500 * time.Millisecond) // let the worker put the others back: the case to explain
	estimates := map[string]time.Time{}
	for _, id := range ids[1:] {
		r := f.enqueue("", "why", id, "-tenant", "acme", "-json")
		var info queue.JobInfo
		if err := json.Unmarshal([]byte(r.stdout), &info); r.code != 0 || err != nil {
			t.Fatalf("why %s: exit %d, %v\n%s%s", id, r.code, err, r.stdout, r.stderr)
		}
		bucket := false
		for _, w := range info.Waits {
			bucket = bucket || w.Kind == "bucket" && !w.Until.IsZero()
		}
		if info.State != queue.StateWaiting || !bucket || info.StartsAt.IsZero() {
			t.Fatalf("why %s: %+v; want waiting on the bucket of api, with a start", id, info)
		}
		estimates[id] = info.StartsAt
		t.Logf("why %s: %s", id, info.Why)
	}
	poll(t, 20*time.Second, func() bool { return a.delivered(ids) == 3 }, func() string { return "every call" })
	// Which of the jobs behind the head takes which slot is the workers'
	// race once a claim hands several over; the slots themselves are
	// the bucket's. So the estimates are set beside the arrivals in time
	// order too.
	var est, arr []time.Time
	for _, c := range a.snapshot() {
		if at, ok := estimates[c.id]; ok {
			t.Logf("WHY %s: estimated start %s, call arrived %s: %+.3f s off", c.id, at.Format(time.RFC3339Nano), c.at.UTC().Format(time.RFC3339Nano), c.at.Sub(at).Seconds())
			est, arr = append(est, at), append(arr, c.at)
		}
	}
	slices.SortFunc(est, time.Time.Compare)
	slices.SortFunc(arr, time.Time.Compare)
	for i := range est {
		t.Logf("WHY slot %d: estimated %s, a call arrived %s: %+.3f s off", i+1, est[i].Format(time.RFC3339Nano), arr[i].UTC().Format(time.RFC3339Nano), arr[i].Sub(est[i]).Seconds())
	}
}

package queue

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEnvelopeRoundTrip: every envelope encode writes decodes to the job
// it was written from, and an envelope of another layout (spaces, escapes)
// decodes too.
func TestEnvelopeRoundTrip(t *testing.T) {
	for _, j := range sampleJobs(500) {
		env, err := j.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeJob([]byte(env))
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		if !reflect.DeepEqual(*got, j) {
			t.Fatalf("%s:\ngot  %#v\nwant %#v", env, *got, j)
		}
	}
	j, err := decodeJob([]byte(`{ "id": "a", "tenant": "caf\u00e9", "type": "t", "cost": 2 }`))
	if err != nil || j.Tenant != "café" || j.Cost != 2 {
		t.Fatalf("decodeJob: %+v, %v; want tenant café, cost 2", j, err)
	}
}

// sampleJobs returns n jobs with every field sometimes set and sometimes
// zero, as decoding gives them back (UTC times, nil empty payloads).
func sampleJobs(n int) []Job {
	r := rand.New(rand.NewSource(1))
	pick := func(s string) string {
		if r.Intn(3) == 0 {
			return ""
		}
		return s
	}
	num := func() int64 {
		switch r.Intn(4) {
		case 0:
			return 0
		case 1:
			return -r.Int63n(1000)
		}
		return r.Int63n(1 << 40)
	}
	jobs := make([]Job, n)
	for i := range jobs {
		var payload []byte
		if r.Intn(4) > 0 {
			payload = make([]byte, r.Intn(300)+1)
			r.Read(payload)
		}
		jobs[i] = Job{
			ID: fmt.Sprintf("job-%d", r.Int63()), nonce: pick(fmt.Sprintf("%016x", r.Uint64())),
			Tenant: "tenant {" + strings.Repeat("x", r.Intn(40)) + "}: !#$%'()*+,-./;=?@[]^_`|~", Type: "sluice.http",
			Payload: payload, Downstream: pick("api-1"), Cost: num(), MaxRetry: int(num()), Timeout: time.Duration(num()),
			enqueuedAt: time.Unix(r.Int63n(4e9), r.Int63n(1e9)).UTC(), retried: int(num()), moves: int(num()), class: pick("gold"),
		}
	}
	return jobs
}

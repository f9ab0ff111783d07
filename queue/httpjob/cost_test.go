package httpjob

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestSettleFromResponse: a downstream that reports each call's real use,
// in a header or in its JSON body, has the job's slot settled to it: the
// job booked 100 units; the bucket then holds what the call used.
func TestSettleFromResponse(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.UnixMicro(1_700_000_000_000_000)) // the scripts' clock stands still
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	th, err := throttle.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.Close() })

	big := `{"pad":"` + strings.Repeat("x", maxCostBody) + `","usage":{"total_tokens":7}}`
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/header", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "30")
		w.Write([]byte(`{}`))
	})
	mux.HandleFunc("/v1/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"c1","choices":[{"text":"a {\"usage\": 1}"}],"usage":{"prompt_tokens":12,"total_tokens":350}}`))
	})
	mux.HandleFunc("/v1/none", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"usage":{}}`)) })
	mux.HandleFunc("/v1/big", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) })
	api := httptestServer(t, mux)

	// 1,000 units a minute: one unit is 60ms of the bucket.
	lim := throttle.Limit{Name: "llm", Rate: 1000, Per: time.Minute, Burst: 1000, Guard: -1, MaxWait: time.Hour}
	for i, tc := range []struct {
		path string
		from string
		want int64 // units the bucket holds after the call
	}{
		{"/v1/header", "header:x-tokens-used", 30},
		{"/v1/json", "json:usage.total_tokens", 350},
		{"/v1/header", "json:usage.total_tokens", 100}, // not reported there: the estimate stands
		{"/v1/none", "json:usage.total_tokens", 100},
		{"/v1/big", "json:usage.total_tokens", 100}, // beyond the part read
		{"/v1/json", "", 100},
	} {
		from, _ := queue.ParseCostFrom(tc.from)
		if tc.from == "" {
			from = queue.CostFrom{}
		}
		h := &Handler{Throttle: th, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
			return queue.Downstream{Name: "llm", Limit: lim, CostFrom: from}, nil
		}}
		key := "llm" + string(rune('a'+i))
		r, err := th.Reserve(context.Background(), key, lim, 100)
		if err != nil || !r.OK {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
		ctx := queue.WithReservation(context.Background(), th, r)
		u, _ := url.JoinPath(api, tc.path)
		job := &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "llm", Units: 100, Payload: []byte(`{"url":"` + u + `"}`)}
		if err := h.ProcessJob(ctx, job); err != nil {
			t.Fatalf("%s with %q: %v", tc.path, tc.from, err)
		}
		p, err := th.Peek(context.Background(), key, lim, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Duration(tc.want) * 60 * time.Millisecond; p.Delay != want {
			t.Errorf("%s with %q: bucket %v ahead; want %v (%d units)", tc.path, tc.from, p.Delay, want, tc.want)
		}
	}
}

// TestReadCost: what counts as a reported cost.
func TestReadCost(t *testing.T) {
	h := http.Header{}
	h.Set("X-Used", " 42 ")
	h.Set("X-Neg", "-3")
	h.Set("X-Frac", "1.5")
	for _, tc := range []struct {
		from, body string
		want       int64
		ok         bool
	}{
		{"header:X-Used", "", 42, true},
		{"header:x-used", "", 42, true},
		{"header:X-Neg", "", 0, false},
		{"header:X-Frac", "", 0, false},
		{"header:X-Missing", "", 0, false},
		{"json:usage.total_tokens", `{"usage":{"total_tokens":12}}`, 12, true},
		{"json:usage.total_tokens", `{"usage":{"total_tokens":1.2e3}}`, 1200, true},
		{"json:usage.total_tokens", `{"usage":{"total_tokens":1.5}}`, 0, false},
		{"json:usage.total_tokens", `{"usage":{"total_tokens":-1}}`, 0, false},
		{"json:usage.total_tokens", `{"usage":{"total_tokens":"12"}}`, 0, false},
		{"json:usage.total_tokens", `{"usage":[12]}`, 0, false},
		{"json:usage.total_tokens", `[{"usage":{"total_tokens":12}}]`, 0, false},
		{"json:usage.total_tokens", `{"usage":{"total_tokens":12`, 12, true}, // cut after the number
		{"json:usage.total_tokens", `not json`, 0, false},
		{"json:extensions.cost.actualQueryCost", `{"data":{"a":[1,{"b":2}]},"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":46}}}`, 46, true},
	} {
		from, err := queue.ParseCostFrom(tc.from)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ReadCost(from, h, []byte(tc.body))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s of %s: %d, %v; want %d, %v", tc.from, tc.body, got, ok, tc.want, tc.ok)
		}
	}
}

package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

func TestHTTPEndpoint(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	pol := algorithms.Policy{Algorithm: algorithms.SlidingWindowLog, Limit: 2, Period: time.Minute}
	p, err := NewProducer(client, &Config{Bound: 3, MaxPayload: 64, Tenants: func(tenant string) TenantPolicy {
		if tenant == "limited" {
			return TenantPolicy{Admission: &pol}
		}
		return TenantPolicy{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(HTTPHandler(p))
	defer srv.Close()
	post := func(body string) (*http.Response, EnqueueResponse) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r EnqueueResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("%s: undecodable answer: %v", body, err)
		}
		return resp, r
	}
	steps := []struct {
		body    string
		code    int
		reason  string
		headers map[string]string
	}{
		{`{"tenant":"limited","type":"x","payload":{"a":1}}`, 202, "", map[string]string{
			"RateLimit-Policy": `"tenant";q=2;w=60`, "RateLimit": `"tenant";r=1;t=60`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60"}},
		{`{"tenant":"limited","type":"x","id":"l-1"}`, 202, "", nil},
		{`{"tenant":"limited","type":"x"}`, 429, "rate_limited", map[string]string{
			"Retry-After": "60", "RateLimit": `"tenant";r=0;t=60`, "X-RateLimit-Remaining": "0"}},
		{`{"tenant":"other","type":"x","id":"o-1"}`, 202, "", nil},
		{`{"tenant":"other","type":"x"}`, 503, "queue_full", map[string]string{"Retry-After": "1"}},
		// A job whose id its tenant has in the queue: 409 with that id,
		// even with the queue full, whatever the job, and for a
		// rate-limited tenant. Another tenant's id is no duplicate.
		{`{"tenant":"other","type":"x","id":"o-1"}`, 409, "duplicate", map[string]string{"Retry-After": ""}},
		{`{"tenant":"limited","type":"y","id":"l-1","payload":2}`, 409, "duplicate", nil},
		{`{"tenant":"limited","type":"x","id":"o-1"}`, 503, "queue_full", nil},
		{`{"tenant":"other"}`, 400, "invalid", nil},
		{`{"tenant":"other","type":"x","bogus":1}`, 400, "invalid", nil},
		{`not json`, 400, "invalid", nil},
		// One object, one meaning: no key twice, none in another case.
		{`{"tenant":"alice","TENANT":"mallory","type":"x"}`, 400, "invalid", nil},
		{`{"tenant":"alice","type":"x","\u0074enant":"mallory"}`, 400, "invalid", nil},
		{`{"tenant":"a","type":"x","payload":"` + strings.Repeat("x", 70) + `"}`, 400, "invalid", nil},
		{`{"tenant":"a","type":"x"} {"again":1}`, 400, "invalid", nil},
		{strings.Repeat(" ", 2<<20), 400, "invalid", nil},
	}
	for i, s := range steps {
		resp, r := post(s.body)
		if resp.StatusCode != s.code || r.Reason != s.reason || s.code != 503 && strings.Contains(s.body, `"o-1"`) && r.ID != "o-1" {
			t.Fatalf("step %d: %d %+v; want %d %q", i, resp.StatusCode, r, s.code, s.reason)
		}
		for k, v := range s.headers {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("step %d: %s = %q, want %q", i, k, got, v)
			}
		}
		// The window's end, a moment after the first job's 60 s, as
		// Retry-After gives it in whole seconds.
		if s.reason == "rate_limited" && (r.RetryAfter <= 59 || r.RetryAfter > 60) {
			t.Errorf("step %d: retry_after %v, want in (59, 60]", i, r.RetryAfter)
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}

// TestHTTPEndpointWantsJSON: POST /enqueue takes only application/json.
// A web page can send a form or text/plain to any address without asking
// the server first (a CORS "simple" request), so those get 415 and
// enqueue nothing (issue 19, finding 3).
func TestHTTPEndpointWantsJSON(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	p, err := NewProducer(client, &Config{Bound: 100})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(HTTPHandler(p))
	defer srv.Close()
	accepted := 0
	for _, c := range []struct {
		contentType string
		code        int
	}{
		{"application/json", 202},
		{"application/json; charset=utf-8", 202},
		{"Application/JSON", 202},
		{"text/plain", 415},
		{"text/plain; charset=utf-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
		{"text/json", 415},
		{"application/json-seq", 415},
		{"application/json;;", 415},
		{"", 415},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"tenant":"a","type":"x"}`))
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var r EnqueueResponse
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != c.code || err != nil || c.code == 415 && (r.Reason != "invalid" || !strings.Contains(r.Error, "application/json")) {
			t.Errorf("Content-Type %q: %d %+v (%v); want %d", c.contentType, resp.StatusCode, r, err, c.code)
		}
		if resp.StatusCode == 202 {
			accepted++
		}
	}
	if st, err := p.Stats(context.Background()); err != nil || st.Depth != int64(accepted) {
		t.Errorf("depth %d, %v; want the %d accepted jobs only", st.Depth, err, accepted)
	}
}

// TestHTTPBodyBudget: the endpoint holds at most its budget of request
// bytes over all requests. With two slow requests holding the whole
// budget, a small job and a large one whose body never comes are both
// answered 503 "busy" with Retry-After at once (before the budget, the
// small job was taken, and the large one read until its client gave up);
// once the slow requests end, the small job is accepted and the budget
// is all given back.
func TestHTTPBodyBudget(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	p, err := NewProducer(client, &Config{Bound: 100})
	if err != nil {
		t.Fatal(err)
	}
	budget := newByteBudget(1 << 20)
	srv := httptest.NewServer(httpHandler(p, budget))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	var conns []net.Conn // closed before srv, whose Close waits for them
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	request := func(length int, body string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, length, body)
		return c
	}
	answer := func(c net.Conn) (*http.Response, EnqueueResponse) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer resp.Body.Close()
		var r EnqueueResponse
		json.NewDecoder(resp.Body).Decode(&r)
		return resp, r
	}
	// Each slow request sends 300,000 of its 900,000 bytes: its buffer
	// grows to 512 KiB, and the two hold the whole budget.
	part := `{"tenant":"slow","type":"x","payload":"` + strings.Repeat("x", 300_000-39)
	slow := []net.Conn{request(900_000, part), request(900_000, part)}
	deadline := time.Now().Add(10 * time.Second)
	for budget.used.Load() < budget.size {
		if time.Now().After(deadline) {
			t.Fatalf("the slow requests hold %d of %d bytes after 10 s", budget.used.Load(), budget.size)
		}
		time.Sleep(5 * time.Millisecond)
	}
	small := `{"tenant":"a","type":"x"}`
	for _, c := range []net.Conn{request(len(small), small), request(1_000_000, "")} {
		resp, r := answer(c)
		c.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || r.Reason != "busy" || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("with the budget full: %d %+v, Retry-After %q; want 503 busy, Retry-After 1", resp.StatusCode, r, resp.Header.Get("Retry-After"))
		}
	}
	for _, c := range slow {
		c.Close()
	}
	deadline = time.Now().Add(10 * time.Second)
	for budget.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still reserved 10 s after the slow requests ended", budget.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := request(len(small), small)
	if resp, r := answer(c); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("after the slow requests: %d %+v, want 202", resp.StatusCode, r)
	}
}

// TestRetryAfterToTheMillisecond: the body's retry_after is the wait
// rounded up to the millisecond, and JSON writes it as such.
func TestRetryAfterToTheMillisecond(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{2970137 * time.Microsecond, `{"retry_after":2.971}`},
		{3 * time.Second, `{"retry_after":3}`},
		{time.Microsecond, `{"retry_after":0.001}`},
		{59999 * time.Millisecond, `{"retry_after":59.999}`},
	} {
		b, err := json.Marshal(EnqueueResponse{RetryAfter: milliseconds(c.d)})
		if err != nil || string(b) != c.want {
			t.Errorf("%v: %s (%v), want %s", c.d, b, err, c.want)
		}
	}
}

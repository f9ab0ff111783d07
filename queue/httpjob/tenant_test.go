package httpjob_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// localhostBase returns a Base that dials every name under localhost
// (acme.localhost:port) at 127.0.0.1 on the same port, as RFC 6761 has
// it, and refuses any other name: the test reaches only loopback.
func localhostBase(t *testing.T) *http.Transport {
	tr := downstream.NewBase()
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasSuffix(host, ".localhost") {
			return nil, errors.New("the test dials only names under localhost")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// TestTenantHost: with a base_url of http://{tenant}.localhost:PORT/api/,
// each tenant's job reaches its own host (the Host the server sees is the
// tenant's), a job that names another tenant's host is refused without a
// call, and a 429 from one store's host pauses that store's bucket only
// (per_tenant: the per-store quota).
func TestTenantHost(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host+r.URL.Path)
		mu.Unlock()
		if strings.HasPrefix(r.Host, "busy.") {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	base := "http://{tenant}.localhost:" + strconv.Itoa(port) + "/api/"
	cfg, err := policy.Parse([]byte("queue: {bound: 10}\ndownstreams:\n  shop: {rate: 100, per_tenant: true, base_url: \"" + base + "\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	th, err := throttle.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.Close() })
	h := &httpjob.Handler{Resolve: cfg.ResolveHTTP, Throttle: th, Base: localhostBase(t)}
	run := func(tenant, host string) error {
		u := "http://" + host + ".localhost:" + strconv.Itoa(port) + "/api/orders"
		job := &queue.Job{ID: "j", Tenant: tenant, Type: httpjob.Type, Downstream: "shop", Payload: []byte(`{"url":"` + u + `"}`)}
		if err := cfg.CheckJob(job); err != nil {
			return err
		}
		return h.ProcessJob(context.Background(), job)
	}

	for _, tenant := range []string{"acme", "bob"} {
		if err := run(tenant, tenant); err != nil {
			t.Fatalf("tenant %s on its own host: %v", tenant, err)
		}
	}
	wantHosts := []string{"acme.localhost:" + strconv.Itoa(port) + "/api/orders", "bob.localhost:" + strconv.Itoa(port) + "/api/orders"}
	mu.Lock()
	got := strings.Join(hosts, " ")
	mu.Unlock()
	if got != strings.Join(wantHosts, " ") {
		t.Fatalf("the server saw %s; want %s", got, strings.Join(wantHosts, " "))
	}

	// Another tenant's host: refused by the check at enqueue, and by the
	// handler itself (archived, no call) for a job that got in otherwise.
	if err := run("acme", "bob"); !errors.Is(err, policy.ErrTenantURL) {
		t.Fatalf("acme's job to bob's host at enqueue: %v; want ErrTenantURL", err)
	}
	for _, c := range []struct{ tenant, host string }{{"acme", "bob"}, {"Acme", "acme"}, {"acme.bob", "bob"}, {"", "x"}} {
		u := "http://" + c.host + ".localhost:" + strconv.Itoa(port) + "/api/orders"
		err := h.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: c.tenant, Type: httpjob.Type, Downstream: "shop", Payload: []byte(`{"url":"` + u + `"}`)})
		if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, policy.ErrTenantURL) {
			t.Errorf("tenant %q to %s: %v; want a permanent refusal", c.tenant, u, err)
		}
	}
	mu.Lock()
	if len(hosts) != 2 {
		t.Errorf("refused jobs reached the server: %q", hosts[2:])
	}
	mu.Unlock()

	// One store's 429 pauses its own bucket, not another store's.
	err = run("busy", "busy")
	var re *queue.RescheduleError
	if !errors.As(err, &re) || !re.Refused {
		t.Fatalf("busy's 429: %v; want a refusal", err)
	}
	d := cfg.Downstreams["shop"]
	for tenant, paused := range map[string]bool{"busy": true, "acme": false} {
		st, err := th.State(context.Background(), queue.ThrottleKey(&queue.Job{Tenant: tenant, Downstream: "shop"}, d.PerTenant), d.Limit)
		if err != nil {
			t.Fatal(err)
		}
		if (st.Paused() > 0) != paused {
			t.Errorf("tenant %s's bucket paused %v; want paused %v", tenant, st.Paused(), paused)
		}
	}
}

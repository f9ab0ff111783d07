package queue

// Bad input: fuzz tests of the job envelope and the HTTP enqueue endpoint,
// and hostile tenant ids, oversized ids and payloads against miniredis, a
// private redis-server and the shared Redis Cluster. Each refusal must
// name its limit and change nothing; each accepted hostile id must keep
// its own state, under keys with exactly one hash tag and a bounded name.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redistest"
)

// FuzzDecodeJob: decodeJob never panics on any bytes; an envelope it
// accepts has an id, a tenant and a type, and encoding it and decoding
// the result gives the same job and the same text again (the dispatcher
// and the worker re-encode envelopes when they put a job back).
func FuzzDecodeJob(f *testing.F) {
	good := Job{ID: "j1", nonce: "0123456789abcdef", Tenant: "acme", Type: "sluice.http", Payload: []byte(`{"url":"https://x/"}`),
		Downstream: "api", Cost: 2, MaxRetry: 3, Timeout: time.Second, enqueuedAt: time.Unix(1700000000, 123).UTC(),
		retried: 1, moves: 2, class: "gold"}
	env, _ := good.encode()
	for _, s := range []string{
		env,
		`{"id":"a","tenant":"b","type":"c"}`,
		`{"id":"a","nonce":"","tenant":"b","type":"c"}`,
		`{"id":"a","tenant":"b","type":"c","nonce":"n\"@:x"}`,
		`{"id":"a","tenant":"{x}:\n","type":"c","payload":"AAEC","enqueued_at":"2026-01-02T03:04:05.999999999+14:00"}`,
		`{"id":"a","tenant":"b","type":"c","payload":null,"cost":-1,"max_retry":-5,"timeout":-1}`,
		`{"id":"a","tenant":"b","type":"c","id":"","tenant":"b"}`,
		`{"id":"","tenant":"b","type":"c"}`,
		`{"ID":"a","TENANT":"b","Type":"c","extra":[1,2,{"x":null}]}`,
		`{"id":"a","tenant":"\ud800\udc00\ud800","type":"c"}`,
		`{"id":"a","tenant":"b","type":"c","enqueued_at":"0000-01-01T00:00:00+23:59"}`,
		`{"id":"a","tenant":"b","type":"c","moves":1e3}`,
		`null`, `[]`, `{}`, `"x"`, ``, `{`, `{"id":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := decodeJob(data)
		if err != nil {
			if j != nil {
				t.Fatalf("decodeJob returned a job and an error: %v", err)
			}
			return
		}
		if j.ID == "" || j.Tenant == "" || j.Type == "" {
			t.Fatalf("accepted an envelope without id, tenant or type: %+v", j)
		}
		enc1, err := j.encode()
		if err != nil {
			t.Fatalf("accepted envelope %q does not encode again: %v", data, err)
		}
		j2, err := decodeJob([]byte(enc1))
		if err != nil {
			t.Fatalf("re-encoded envelope %q is refused: %v", enc1, err)
		}
		enc2, err := j2.encode()
		if err != nil || enc2 != enc1 {
			t.Fatalf("envelope not stable:\n%s\n%s (%v)", enc1, enc2, err)
		}
		if !j.enqueuedAt.Equal(j2.enqueuedAt) {
			t.Fatalf("enqueued_at %v became %v", j.enqueuedAt, j2.enqueuedAt)
		}
		a, b := *j, *j2
		a.enqueuedAt, b.enqueuedAt = time.Time{}, time.Time{}
		if len(a.Payload) == 0 {
			a.Payload = nil
		}
		if len(b.Payload) == 0 {
			b.Payload = nil
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("job changed across encode/decode:\n%+v\n%+v", a, b)
		}
	})
}

// The fuzzed endpoint's configuration. Before each request the waiting
// room holds: tenant "limited" (token bucket of 1 per hour) has used its
// token, tenant "full" is at its tenant bound of 2, the first of its jobs
// with id fzDupID; in queue-full mode one more job fills the queue's bound.
const (
	fzBound      = 4
	fzMaxPayload = 256
	fzDupID      = "dup-1"
)

// fuzzRoom is one fuzz process's miniredis and the producers on it.
type fuzzRoom struct {
	m        *miniredis.Miniredis
	client   *redis.Client
	p        *Producer
	h        http.Handler
	deadP    *Producer // on an address where nothing listens
	deadH    http.Handler
	mode     int  // the mode the room was prepared for; -1 none
	prepared bool // the room holds exactly the state of mode
}

func newFuzzRoom(tb testing.TB) *fuzzRoom {
	m := miniredis.RunT(tb)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { client.Close() })
	pol := algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 1, Period: time.Hour}
	cfg := Config{Queue: "fz", Bound: fzBound, TenantBound: 2, MaxPayload: fzMaxPayload, Tenants: func(tenant string) TenantPolicy {
		if tenant == "limited" {
			return TenantPolicy{Admission: &pol, Class: "limited"}
		}
		return TenantPolicy{}
	}}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		tb.Fatal(err)
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("redis unreachable (test)")
		}})
	tb.Cleanup(func() { dead.Close() })
	deadP, err := NewProducer(dead, &cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &fuzzRoom{m: m, client: client, p: p, h: HTTPHandler(p), deadP: deadP, deadH: HTTPHandler(deadP), mode: -1}
}

// prepare resets the waiting room to the state of mode unless it holds it.
func (r *fuzzRoom) prepare(tb testing.TB, mode int) {
	if r.prepared && r.mode == mode {
		return
	}
	r.m.FlushAll()
	ctx := context.Background()
	fill := []Job{{Tenant: "limited"}, {Tenant: "full", ID: fzDupID}, {Tenant: "full"}}
	if mode == 1 {
		fill = append(fill, Job{Tenant: "filler"})
	}
	for _, job := range fill {
		job.Type = "x"
		if _, err := r.p.Enqueue(ctx, job); err != nil {
			tb.Fatalf("preparing the waiting room: %v", err)
		}
	}
	r.mode, r.prepared = mode, true
}

// FuzzEnqueueEndpoint: any body POSTed to the endpoint gets 202, 400, 409,
// 429 or 503 with one valid JSON object whose reason matches the status; a
// 400, 409, 429 or 503 leaves the waiting room exactly as it was (Stats
// and every key); a 202 adds exactly the job the body describes. mode
// selects a waiting room with room (0), a full queue (1) or an unreachable
// Redis (2).
func FuzzEnqueueEndpoint(f *testing.F) {
	for _, s := range []string{
		`{"tenant":"acme","type":"x"}`,
		`{"tenant":"acme","type":"x","payload":{"a":[1,2,3]},"cost":1,"max_retry":-1,"timeout":"30s","id":"job-1"}`,
		`{"tenant":"{acme}:\n🙂","type":"sluice.http","downstream":"api","payload":"x"}`,
		`{"tenant":"limited","type":"x"}`,
		`{"tenant":"limited","type":"x","cost":2}`,
		`{"tenant":"full","type":"x"}`,
		`{"tenant":"acme"}`,
		`{"tenant":"acme","type":"bad type"}`,
		`{"tenant":"acme","type":"x","bogus":1}`,
		`{"tenant":"acme","type":"x","timeout":"-1s"}`,
		`{"tenant":"acme","type":"x","timeout":"forever"}`,
		`{"tenant":"acme","type":"x","cost":-1}`,
		`{"tenant":"acme","type":"x","max_retry":-2}`,
		`{"tenant":"acme","type":"x","id":"has space"}`,
		`{"tenant":"acme","type":"x","id":"` + fzDupID + `"}`,
		`{"tenant":"limited","type":"x","id":"` + fzDupID + `","cost":2}`,
		`{"tenant":"acme","type":"x"} {"tenant":"acme","type":"x"}`,
		`{"tenant":"acme","type":"x","payload":"` + strings.Repeat("p", fzMaxPayload) + `"}`,
		`{"tenant":"` + strings.Repeat("t", MaxTenantLen) + `","type":"x"}`,
		`{"tenant":"` + strings.Repeat("t", MaxTenantLen+1) + `","type":"x"}`,
		`{"tenant":"\ud800","type":"x"}`,
		`{"tenant":"a\u0000b","type":"x"}`,
		`{"tenant":"acme","tenant":"other","type":"x"}`,
		`[]`, `null`, ``, `not json`, `{"tenant":`,
	} {
		for mode := uint8(0); mode < 3; mode++ {
			f.Add([]byte(s), mode)
		}
	}
	// Over the body limit (payload + tenant + 64 KiB).
	f.Add([]byte(`{"tenant":"acme","type":"x","payload":"`+strings.Repeat("p", fzMaxPayload+MaxTenantLen+64<<10)+`"}`), uint8(0))
	room := newFuzzRoom(f)
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		m := int(mode % 3)
		h, p := room.h, room.p
		if m == 2 {
			h, p = room.deadH, room.deadP
			m = 0 // the reachable room stays as it is
		}
		room.prepare(t, m)
		ctx := context.Background()
		before, err := room.p.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dump := room.m.Dump()

		req := httptest.NewRequest(http.MethodPost, "/enqueue", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		code := rec.Code
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		out := rec.Body.Bytes()
		if !json.Valid(out) {
			t.Fatalf("status %d: answer is not JSON: %q", code, out)
		}
		var resp EnqueueResponse
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&resp); err != nil || dec.More() {
			t.Fatalf("status %d: answer %q is not one EnqueueResponse: %v", code, out, err)
		}
		switch code {
		case http.StatusAccepted:
			if p == room.deadP {
				t.Fatalf("202 without Redis: %s", out)
			}
			if resp.ID == "" || resp.Error != "" || resp.Reason != "" || resp.Depth != before.Depth+1 {
				t.Fatalf("202 answer %s; depth before %d", out, before.Depth)
			}
			room.prepared = false
			checkAccepted(t, room, body, resp, before)
			return
		case http.StatusBadRequest:
			if resp.Reason != "invalid" || resp.Error == "" {
				t.Fatalf("400 answer %s", out)
			}
		case http.StatusConflict:
			// The only id in the room that a body can name.
			if resp.Reason != "duplicate" || resp.ID != fzDupID || resp.Error == "" || p == room.deadP {
				t.Fatalf("409 answer %s", out)
			}
		case http.StatusTooManyRequests:
			if resp.Reason != "rate_limited" || rec.Header().Get("Retry-After") == "" || rec.Header().Get("RateLimit") == "" {
				t.Fatalf("429 answer %s, headers %v", out, rec.Header())
			}
			if n, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || n < 1 {
				t.Fatalf("429 Retry-After %q", rec.Header().Get("Retry-After"))
			}
		case http.StatusServiceUnavailable:
			want := []string{"queue_full", "tenant_full"}
			if p == room.deadP {
				want = []string{"unavailable"}
			}
			if !slices.Contains(want, resp.Reason) || rec.Header().Get("Retry-After") != "1" {
				t.Fatalf("503 answer %s (mode %d), Retry-After %q", out, mode%3, rec.Header().Get("Retry-After"))
			}
		default:
			t.Fatalf("status %d: %s", code, out)
		}
		// Refused: nothing changed.
		after, err := room.p.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("status %d changed the stats: %+v -> %+v", code, before, after)
		}
		if d := room.m.Dump(); d != dump {
			t.Fatalf("status %d changed Redis:\n%s\n---\n%s", code, dump, d)
		}
	})
}

// checkAccepted checks that the job the endpoint accepted is in its
// tenant's list, last, exactly as the body describes it.
func checkAccepted(t *testing.T, room *fuzzRoom, body []byte, resp EnqueueResponse, before Stats) {
	t.Helper()
	var req EnqueueRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		t.Fatalf("accepted a body that does not decode: %v", err)
	}
	ctx := context.Background()
	_, list, err := room.p.shards[0].tenant(req.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	it, err := room.client.LIndex(ctx, list, -1).Result()
	if err != nil {
		t.Fatalf("tenant %q: no job in its list: %v", req.Tenant, err)
	}
	j, err := decodeItem(it)
	if err != nil {
		t.Fatalf("stored entry %q: %v", it, err)
	}
	if len(j.nonce) != 16 || strings.Trim(j.nonce, "0123456789abcdef") != "" {
		t.Fatalf("stored job's nonce %q; want 16 hex digits", j.nonce)
	}
	want := Job{ID: resp.ID, nonce: j.nonce, Tenant: req.Tenant, Type: req.Type, Downstream: req.Downstream, Cost: req.Cost, MaxRetry: req.MaxRetry,
		class: "default", enqueuedAt: j.enqueuedAt, idRecorded: req.ID != ""}
	if req.Tenant == "limited" {
		want.class = "limited"
	}
	if len(req.Payload) > 0 {
		want.Payload = []byte(req.Payload)
	}
	if req.Timeout != "" {
		want.Timeout, _ = time.ParseDuration(req.Timeout)
	}
	if req.ID != "" && resp.ID != req.ID {
		t.Fatalf("job id %q answered as %q", req.ID, resp.ID)
	}
	if !reflect.DeepEqual(*j, want) {
		t.Fatalf("stored job\n%+v\nwant\n%+v", *j, want)
	}
	after, err := room.p.Stats(ctx)
	if err != nil || after.Depth != before.Depth+1 {
		t.Fatalf("depth %d -> %d (%v)", before.Depth, after.Depth, err)
	}
}

// hostileTenants are valid tenant ids that could confuse key names or
// each other: braces, colons, newlines, unicode, ids that look like
// another id's encoding or like a whole key, and ids of up to 1024 bytes
// that differ only in their last byte.
func hostileTenants() []string {
	long := strings.Repeat("x", MaxTenantLen-1)
	return []string{
		"acme", "{acme}", "acme}", "{acme", "}{", "{}", "{", "}",
		"a:b", "a:b:", ":", "acme:{x}", "sluice:q:t:{default}:=acme",
		"new\nline", "new\r\nline", "tab\t", " acme", "acme ", "nul\x00",
		"ünïcödé", "日本語", "🙂", "=acme", "#acme",
		"#" + strings.Repeat("0", 64), "=" + strings.Repeat("a", 64),
		strings.Repeat("a", 64), strings.Repeat("a", 65),
		long + "a", long + "b", long + "{", long + "}",
	}
}

// hostileQueue returns a queue name no other test uses.
func hostileQueue(prefix string) string {
	return prefix + "-" + randomHex(16)[:12]
}

// checkKeyNames checks every key of the waiting room: exactly one '{' and
// one '}', the tag being the queue's own (so that one Cluster slot holds
// them all, asynq's among them), and a bounded length.
func checkKeyNames(t *testing.T, keys []string, queue string) {
	t.Helper()
	const maxKeyLen = 200
	tag := "{" + queue + "}"
	for _, k := range keys {
		if !strings.HasPrefix(k, DefaultPrefix+":") {
			continue // asynq's
		}
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.Contains(k, tag) {
			t.Errorf("key %q: want exactly one hash tag, %s", k, tag)
		}
		if len(k) > maxKeyLen {
			t.Errorf("key %.80q... is %d bytes; want at most %d", k, len(k), maxKeyLen)
		}
	}
}

// hostileTarget is a Redis to run the hostile-input tests on.
type hostileTarget struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
	keys   func(t *testing.T) []string // nil: KEYS is not meaningful (a cluster)
}

func hostileTargets() []hostileTarget {
	var mu sync.Mutex
	mr := map[*testing.T]*miniredis.Miniredis{}
	srv := map[*testing.T]*redistest.Server{}
	return []hostileTarget{
		{"miniredis", func(t *testing.T) redis.UniversalClient {
			m := miniredis.RunT(t)
			mu.Lock()
			mr[t] = m
			mu.Unlock()
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			return c
		}, func(t *testing.T) []string {
			mu.Lock()
			defer mu.Unlock()
			return mr[t].Keys()
		}},
		{"redis-private", func(t *testing.T) redis.UniversalClient {
			s := redistest.Start(t, redistest.Config{})
			mu.Lock()
			srv[t] = s
			mu.Unlock()
			return s.Client(t)
		}, func(t *testing.T) []string {
			mu.Lock()
			s := srv[t]
			mu.Unlock()
			c := s.Client(t)
			keys, err := c.Keys(context.Background(), "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			return keys
		}},
		{"redis-cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t) }, nil},
	}
}

// TestHostileTenantsKeptApart: every hostile tenant id is accepted, gets
// exactly its own jobs (tenant i has i+1 jobs), its own admission state
// and its own turn in the drain; every key has one hash tag (on a cluster
// the one-script enqueue would fail with CROSSSLOT otherwise) and a
// bounded name; each job reaches the handler with its tenant's exact
// bytes; after the drain nothing of the tenants is left but admission
// state that expires.
func TestHostileTenantsKeptApart(t *testing.T) {
	for _, tg := range hostileTargets() {
		t.Run(tg.name, func(t *testing.T) {
			client := tg.client(t)
			ctx := context.Background()
			pol := algorithms.Policy{Algorithm: algorithms.SlidingWindowCounter, Limit: 1000, Period: time.Minute}
			cfg := Config{Queue: hostileQueue("hostile"), Bound: 10000, TenantBound: 100,
				Tenants: func(string) TenantPolicy { return TenantPolicy{Admission: &pol} }}
			p, err := NewProducer(client, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			tenants := hostileTenants()
			want := map[string]int{}
			total := 0
			for i, tenant := range tenants {
				for n := 0; n <= i; n++ {
					r, err := p.Enqueue(ctx, Job{Tenant: tenant, Type: "x", Payload: []byte(tenant)})
					if err != nil {
						t.Fatalf("tenant %.40q, job %d: %v", tenant, n, err)
					}
					// Admission counts this tenant's jobs only.
					if r.Decision.Remaining != int64(pol.Limit)-int64(n)-1 {
						t.Fatalf("tenant %.40q, job %d: remaining %d; admission state shared with another tenant?", tenant, n, r.Decision.Remaining)
					}
				}
				want[tenant] = i + 1
				total += i + 1
			}
			for tenant, n := range want {
				if d, err := p.TenantDepth(ctx, tenant); err != nil || d != int64(n) {
					t.Fatalf("tenant %.40q: depth %d (%v), want %d", tenant, d, err, n)
				}
			}
			st, err := p.Stats(ctx)
			if err != nil || st.Depth != int64(total) || st.Tenants != int64(len(tenants)) {
				t.Fatalf("stats %+v (%v); want depth %d and %d tenants", st, err, total, len(tenants))
			}
			if tg.keys != nil {
				keys := tg.keys(t)
				checkKeyNames(t, keys, cfg.Queue)
				// One list and one admission key per tenant, plus meta,
				// ring, members and the shard count (no weights: every tenant has the
				// default weight 1, which is not stored; no ids: the
				// producer chose them, and does not record those; no
				// cdepth: every job is of the default class, which is not
				// counted there).
				if len(keys) != 2*len(tenants)+4 {
					t.Errorf("%d keys for %d tenants, want %d: %q", len(keys), len(tenants), 2*len(tenants)+4, keys)
				}
			}

			// Drain: every job reaches the handler once, with its tenant.
			var mu sync.Mutex
			got := map[string]int{}
			done := make(chan struct{})
			ran := 0
			s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 8, PollInterval: 5 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
				Retention: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(HandlerFunc(func(ctx context.Context, j *Job) error {
				mu.Lock()
				defer mu.Unlock()
				if string(j.Payload) != j.Tenant {
					t.Errorf("job of tenant %.40q carries payload %.40q", j.Tenant, j.Payload)
				}
				got[j.Tenant]++
				if ran++; ran == total {
					close(done)
				}
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Shutdown)
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("%d of %d jobs ran in 60s", ran, total)
			}
			mu.Lock()
			if !reflect.DeepEqual(got, want) {
				for tenant, n := range want {
					if got[tenant] != n {
						t.Errorf("tenant %.40q: %d jobs ran, want %d", tenant, got[tenant], n)
					}
				}
			}
			mu.Unlock()
			// The waiting room empties: once the dispatcher has seen each
			// tenant's list empty, only meta (depth 0), the admission
			// state (with its TTL) and the queue's shard count are left.
			leftover := func() []string {
				var left []string
				if tg.keys != nil {
					for _, k := range tg.keys(t) {
						if strings.HasPrefix(k, DefaultPrefix+":") && !strings.HasPrefix(k, p.shards[0].admPrefix) && k != p.shards[0].meta &&
							!strings.HasPrefix(k, DefaultPrefix+":shards:") && !strings.HasPrefix(k, DefaultPrefix+":procs:") { // the workers' heartbeats
							left = append(left, k)
						}
					}
					return left
				}
				k := p.shards[0]
				check := []string{k.cdepth, k.ring, k.members, k.weights, k.turns, k.sleep, k.ids}
				for _, tenant := range tenants {
					_, list, _ := k.tenant(tenant)
					check = append(check, list)
				}
				for _, key := range check {
					if n, err := client.Exists(ctx, key).Result(); err != nil || n != 0 {
						left = append(left, key)
					}
				}
				return left
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				st, err := p.Stats(ctx)
				left := leftover()
				if err == nil && st.Depth == 0 && st.Tenants == 0 && st.HandedOver == 0 && len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10s after the drain: %+v (%v); keys left: %q", st, err, left)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if tg.keys != nil {
				for _, k := range tg.keys(t) {
					if !strings.HasPrefix(k, p.shards[0].admPrefix) {
						continue
					}
					if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
						t.Errorf("admission key %q has no TTL (%v, %v)", k, ttl, err)
					}
				}
			}
		})
	}
}

// TestOversizedInputRefused: a tenant id over 1 KiB (up to a megabyte), a
// payload over MaxPayload and a body over the endpoint's limit are refused
// with an error that names the limit, from Go and over HTTP, and change
// nothing in Redis.
func TestOversizedInputRefused(t *testing.T) {
	for _, tg := range hostileTargets()[:2] {
		t.Run(tg.name, func(t *testing.T) {
			client := tg.client(t)
			ctx := context.Background()
			// An hour's period keeps the admission state of the one job
			// below alive (6 minutes) across the slow refusals: a key that
			// expired between the snapshots would look like a change.
			pol := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: 10, Period: time.Hour}
			cfg := Config{Queue: hostileQueue("oversized"), Bound: 100, MaxPayload: 1000,
				Tenants: func(t string) TenantPolicy {
					if t == "tabbed" { // a class no entry's header can hold
						return TenantPolicy{Class: "a\tb"}
					}
					return TenantPolicy{Admission: &pol}
				}}
			p, err := NewProducer(client, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			// One job, so that there is state to leave unchanged.
			if _, err := p.Enqueue(ctx, Job{Tenant: "acme", Type: "x"}); err != nil {
				t.Fatal(err)
			}
			snapshot := func() string { return snapshotKeys(t, client, tg.keys(t)) }
			before := snapshot()
			mib := strings.Repeat("m", 1<<20)
			for _, c := range []struct {
				job  Job
				want string
			}{
				{Job{Tenant: mib, Type: "x"}, "tenant id is 1048576 bytes; the limit is 1024"},
				{Job{Tenant: "{" + mib + "}", Type: "x"}, "tenant id is 1048578 bytes; the limit is 1024"},
				{Job{Tenant: strings.Repeat("é", 513), Type: "x"}, "tenant id is 1026 bytes; the limit is 1024"},
				{Job{Tenant: strings.Repeat("x", MaxTenantLen+1), Type: "x"}, "tenant id is 1025 bytes; the limit is 1024"},
				{Job{Tenant: "acme", Type: "x", Payload: make([]byte, 1001)}, "payload is 1001 bytes; the limit is 1000"},
				{Job{Tenant: "acme", Type: "x", Payload: make([]byte, 1<<20)}, "payload is 1048576 bytes; the limit is 1000"},
				{Job{Tenant: "acme", Type: strings.Repeat("t", MaxTypeLen+1)}, "use at most 256 bytes"},
				{Job{Tenant: "acme", Type: "x", ID: strings.Repeat("i", MaxIDLen+1)}, "use at most 128 bytes"},
				{Job{Tenant: "acme", Type: "x", Cost: 11}, "exceeds the capacity 10"},
				{Job{Tenant: "tabbed", Type: "x"}, "tenant class contains a tab"},
			} {
				_, err := p.Enqueue(ctx, c.job)
				if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("tenant %.20q (%d bytes), payload %d bytes: %v; want ErrInvalidJob saying %q", c.job.Tenant, len(c.job.Tenant), len(c.job.Payload), err, c.want)
				}
				if err != nil && len(err.Error()) > 400 {
					t.Errorf("error of %d bytes: the id or payload is echoed whole", len(err.Error()))
				}
			}
			// The same over HTTP.
			h := HTTPHandler(p)
			limit := cfg.MaxPayload + MaxTenantLen + 64<<10
			for _, c := range []struct {
				body string
				want string
			}{
				{`{"tenant":"` + mib + `","type":"x"}`, fmt.Sprintf("larger than %d bytes", limit)},
				{`{"tenant":"` + strings.Repeat("t", 60<<10) + `","type":"x"}`, "tenant id is 61440 bytes; the limit is 1024"},
				{`{"tenant":"` + strings.Repeat("t", MaxTenantLen+1) + `","type":"x"}`, "tenant id is 1025 bytes; the limit is 1024"},
				{`{"tenant":"acme","type":"x","payload":"` + strings.Repeat("p", 1000) + `"}`, "payload is 1002 bytes; the limit is 1000"},
				{`{"tenant":"acme","type":"x","payload":"` + strings.Repeat("p", limit) + `"}`, fmt.Sprintf("larger than %d bytes", limit)},
			} {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/enqueue", strings.NewReader(c.body))
				req.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(rec, req)
				var resp EnqueueResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
					t.Fatalf("body of %d bytes: answer %q: %v", len(c.body), rec.Body.Bytes(), err)
				}
				if rec.Code != http.StatusBadRequest || resp.Reason != "invalid" || !strings.Contains(resp.Error, c.want) {
					t.Errorf("body of %d bytes: %d %+v; want 400 saying %q", len(c.body), rec.Code, resp, c.want)
				}
			}
			if after := snapshot(); after != before {
				t.Fatalf("refused input changed Redis:\n%s---\n%s", before, after)
			}
		})
	}
}

// snapshotKeys describes the keys and their contents, sorted by name, so
// that a refusal can be shown to change nothing. Keys that do not exist
// appear as such ("none"), so a list of the keys a step may write can be
// given on a Redis Cluster, where KEYS is not meaningful.
func snapshotKeys(t *testing.T, client redis.UniversalClient, keys []string) string {
	t.Helper()
	ctx := context.Background()
	sort := slices.Clone(keys)
	slices.Sort(sort)
	var b strings.Builder
	for _, k := range sort {
		typ, err := client.Type(ctx, k).Result()
		if err != nil {
			t.Fatalf("TYPE %s: %v", k, err)
		}
		fmt.Fprintf(&b, "%s %s", k, typ)
		switch typ {
		case "string":
			v, _ := client.Get(ctx, k).Result()
			fmt.Fprintf(&b, " %q", v)
		case "hash":
			v, _ := client.HGetAll(ctx, k).Result()
			fmt.Fprintf(&b, " %v", v)
		case "list":
			v, _ := client.LRange(ctx, k, 0, -1).Result()
			fmt.Fprintf(&b, " %q", v)
		case "set":
			v, _ := client.SMembers(ctx, k).Result()
			slices.Sort(v)
			fmt.Fprintf(&b, " %q", v)
		case "zset":
			v, _ := client.ZRangeWithScores(ctx, k, 0, -1).Result()
			fmt.Fprintf(&b, " %v", v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestNonUTF8TenantIsRefused: a tenant id that is not valid UTF-8 cannot
// survive the job's JSON envelope (encoding/json replaces each bad byte
// by U+FFFD), so the worker would count the job out against another
// tenant's depth and hand it to the handler under another id. Such an id
// must be refused.
func TestNonUTF8TenantIsRefused(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	cfg := Config{Queue: "utf8", Bound: 10, TenantBound: 1}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"\xff", "ok\xfe", "\xc3\x28"} {
		_, err = p.Enqueue(ctx, Job{Tenant: id, Type: "x"})
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("tenant %q: %v; want ErrInvalidJob naming UTF-8", id, err)
		}
	}
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("%d keys (%v) after refusals; want none", n, err)
	}
}

// FuzzDecodeItem: decodeItem never panics on any entry, and the entry
// Job.item writes decodes to the job it was written from.
func FuzzDecodeItem(f *testing.F) {
	good := Job{ID: "a", nonce: "00ff00ff00ff00ff", Tenant: "t", Type: "x", Payload: []byte("p"), class: "gold"}
	it, err := good.item()
	if err != nil {
		f.Fatal(err)
	}
	plain := good
	plain.class = "default"
	msg, err := plain.item()
	if err != nil {
		f.Fatal(err)
	}
	h := "sluice/2\tclass=c\ttask=sluice:a@b:0\n"
	for _, seed := range []string{it, msg, "sluice/2\t", "sluice/2\tclass=c\n", "sluice/1\tclass=c\ttask=sluice:a@b:0\n{}", h, h + "\x12\x7f{}",
		`{"id":"a","tenant":"t","type":"x"}`, "\x0a", h + "\x0a\x01x\x12\x7f{}", h + "\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
		h + "\x0d\x01\x02\x03\x04\x12\x02{}", h + "\x4a\x03abc"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		j, err := decodeItem(entry)
		if err == nil && (j.ID == "" || j.Tenant == "" || j.Type == "") {
			t.Fatalf("decodeItem(%q) = %+v without an error", entry, j)
		}
		for _, c := range []struct {
			entry string
			class string
		}{{it, "gold"}, {msg, "default"}} {
			if entry == c.entry && (err != nil || j.ID != "a" || string(j.Payload) != "p" || j.class != c.class) {
				t.Fatalf("the item of a %s job decodes to %+v, %v", c.class, j, err)
			}
		}
	})
}

// TestScriptRefusalsChangeNothing: the enqueue script records a job's id
// and counts it in the depth before it checks the bound and admission,
// and takes both back when it refuses. A duplicate id, a full queue, a
// full tenant backlog and an admission refusal each leave Redis as it
// was, and the refused id is then accepted once there is room.
func TestScriptRefusalsChangeNothing(t *testing.T) {
	for _, tg := range hostileTargets()[:2] {
		t.Run(tg.name, func(t *testing.T) {
			client := tg.client(t)
			ctx := context.Background()
			pol := algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 1, Period: time.Hour}
			cfg := Config{Queue: hostileQueue("refusals"), Bound: 4, TenantBound: 2,
				Tenants: func(t string) TenantPolicy {
					if t == "limited" {
						return TenantPolicy{Admission: &pol}
					}
					return TenantPolicy{}
				}}
			p, err := NewProducer(client, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range []Job{{ID: "a1", Tenant: "acme"}, {ID: "a2", Tenant: "acme"}, {ID: "l1", Tenant: "limited"}, {ID: "o1", Tenant: "other"}} {
				j.Type = "x"
				if _, err := p.Enqueue(ctx, j); err != nil {
					t.Fatalf("%s: %v", j.ID, err)
				}
			}
			// refuse enqueues each job, whose Type names the refusal it
			// must meet, and checks that Redis is as it was.
			refuse := func(jobs ...Job) {
				t.Helper()
				before := snapshotKeys(t, client, tg.keys(t))
				for _, j := range jobs {
					_, err := p.Enqueue(ctx, j)
					var full *QueueFullError
					var dup *DuplicateJobError
					var limited *RateLimitedError
					var ok bool
					switch j.Type {
					case "full":
						ok = errors.As(err, &full) && full.Tenant == "" && full.Depth == 4
					case "tenant-full":
						ok = errors.As(err, &full) && full.Tenant == j.Tenant && full.Depth == 2
					case "duplicate":
						ok = errors.As(err, &dup)
					case "limited":
						ok = errors.As(err, &limited)
					}
					if !ok {
						t.Errorf("job %s of %s: %v; want it refused: %s", j.ID, j.Tenant, err, j.Type)
					}
				}
				if after := snapshotKeys(t, client, tg.keys(t)); after != before {
					t.Fatalf("refusals changed Redis:\n%s---\n%s", before, after)
				}
			}
			// The queue is full (4 of 4).
			refuse(Job{ID: "n1", Tenant: "new", Type: "full"}, Job{ID: "a1", Tenant: "acme", Type: "duplicate"}, Job{ID: "a1", Tenant: "other", Type: "full"})
			// Room for one more in the queue (as if a worker had taken a
			// job): acme's backlog is still full, and limited's window
			// has no more admissions.
			if err := client.HIncrBy(ctx, p.shards[0].meta, "depth", -1).Err(); err != nil {
				t.Fatal(err)
			}
			refuse(Job{ID: "n1", Tenant: "acme", Type: "tenant-full"}, Job{ID: "n1", Tenant: "limited", Type: "limited"})
			// The refused id was not kept: it is accepted where there is
			// room, and the depth counts it once.
			if _, err := p.Enqueue(ctx, Job{ID: "n1", Tenant: "other", Type: "x"}); err != nil {
				t.Fatalf("n1 for a tenant with room: %v", err)
			}
			if d, err := client.HGet(ctx, p.shards[0].meta, "depth").Int64(); err != nil || d != 4 {
				t.Errorf("depth %d (%v); want 4", d, err)
			}
		})
	}
}

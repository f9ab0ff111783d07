package queue

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// keyPost sends body to h from addr with the Authorization field auth
// (none when empty) and returns the answer.
func keyPost(t *testing.T, h http.Handler, addr, auth, body string) (*httptest.ResponseRecorder, EnqueueResponse) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/enqueue", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = addr
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var resp EnqueueResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("%s: undecodable answer %q: %v", body, w.Body, err)
	}
	return w, resp
}

func newKeyed(t *testing.T, client redis.UniversalClient) (*Producer, http.Handler) {
	t.Helper()
	cfg := testConfig(t, 100)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := HTTPKeyHandler(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, h
}

// TestKeyNamesTheTenant: the tenant of a request is its key's; a body
// naming another is refused 403 and nothing is enqueued.
func TestKeyNamesTheTenant(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		p, h := newKeyed(t, client)
		_, keyA, err := p.Keys().Add(ctx, "tenant-a")
		if err != nil {
			t.Fatal(err)
		}
		_, keyBC, err := p.Keys().Add(ctx, "tenant-b", "tenant-c")
		if err != nil {
			t.Fatal(err)
		}
		const addr = "192.0.2.1:1234"
		steps := []struct {
			auth, body string
			code       int
			reason     string
		}{
			{"Bearer " + keyA, `{"tenant":"tenant-b","type":"x"}`, 403, "forbidden_tenant"},
			{"Bearer " + keyA, `{"tenant":"tenant-a ","type":"x"}`, 403, "forbidden_tenant"},
			{"Bearer " + keyBC, `{"tenant":"tenant-a","type":"x"}`, 403, "forbidden_tenant"},
			{"Bearer " + keyBC, `{"type":"x"}`, 400, "invalid"},
			{"", `{"tenant":"tenant-a","type":"x"}`, 401, "missing_key"},
			{"Bearer slk_0000000000000000_" + strings.Repeat("A", 43), `{"tenant":"tenant-a","type":"x"}`, 401, "bad_key"},
			{"Bearer " + keyA[:len(keyA)-1] + "B", `{"tenant":"tenant-a","type":"x"}`, 401, "bad_key"},
			{"Basic " + keyA, `{"tenant":"tenant-a","type":"x"}`, 401, "bad_key"},
			{"bearer " + keyA, `{"type":"x","id":"a-1"}`, 202, ""},
			{"Bearer " + keyA, `{"tenant":"tenant-a","type":"x"}`, 202, ""},
			{"Bearer " + keyBC, `{"tenant":"tenant-c","type":"x"}`, 202, ""},
		}
		for i, s := range steps {
			w, resp := keyPost(t, h, addr, s.auth, s.body)
			if w.Code != s.code || resp.Reason != s.reason {
				t.Fatalf("step %d (%s): %d %q (%s), want %d %q", i, s.body, w.Code, resp.Reason, resp.Error, s.code, s.reason)
			}
			if s.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("step %d: 401 without WWW-Authenticate", i)
			}
		}
		st, err := p.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Depth != 3 {
			t.Errorf("depth %d, want the 3 jobs accepted", st.Depth)
		}
		// The job sent without a tenant is tenant-a's: its id is taken
		// there, and free for tenant-c.
		if w, resp := keyPost(t, h, addr, "Bearer "+keyA, `{"tenant":"tenant-a","type":"x","id":"a-1"}`); w.Code != 409 {
			t.Errorf("a-1 again for tenant-a: %d %q, want 409", w.Code, resp.Reason)
		}
		if w, resp := keyPost(t, h, addr, "Bearer "+keyBC, `{"tenant":"tenant-c","type":"x","id":"a-1"}`); w.Code != 202 {
			t.Errorf("a-1 for tenant-c: %d %q, want 202", w.Code, resp.Reason)
		}
	})
}

// TestKeysChangeWithoutRestart: a handler made before a rotation or a
// revocation follows it from the next request.
func TestKeysChangeWithoutRestart(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		p, h := newKeyed(t, client)
		keys := p.Keys()
		const addr = "192.0.2.2:1234"
		post := func(key string) int {
			w, _ := keyPost(t, h, addr, "Bearer "+key, `{"type":"x"}`)
			return w.Code
		}
		ak, old, err := keys.Add(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if c := post(old); c != 202 {
			t.Fatalf("new key: %d, want 202", c)
		}
		fresh, err := keys.Rotate(ctx, ak.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c := post(old); c != 401 {
			t.Errorf("rotated-out key: %d, want 401", c)
		}
		if c := post(fresh); c != 202 {
			t.Errorf("rotated-in key: %d, want 202", c)
		}
		list, err := keys.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != ak.ID || !slices.Equal(list[0].Tenants, []string{"acme"}) || list[0].Rotated.IsZero() {
			t.Errorf("List after the rotation: %+v", list)
		}
		if err := keys.Revoke(ctx, ak.ID); err != nil {
			t.Fatal(err)
		}
		if c := post(fresh); c != 401 {
			t.Errorf("revoked key: %d, want 401", c)
		}
		if _, err := keys.Rotate(ctx, ak.ID); !errors.Is(err, ErrKeyNotFound) {
			t.Errorf("rotating a revoked key: %v, want ErrKeyNotFound", err)
		}
		if err := keys.Revoke(ctx, ak.ID); !errors.Is(err, ErrKeyNotFound) {
			t.Errorf("revoking twice: %v, want ErrKeyNotFound", err)
		}
		if list, err := keys.List(ctx); err != nil || len(list) != 0 {
			t.Errorf("List after the revocation: %+v, %v", list, err)
		}
	})
}

// TestKeyFailuresLimitedByAddress: 1,000 wrong keys from one address are
// answered 401 up to the limit and 429 after it; a valid key from that
// address, and a wrong one from another, are unaffected.
func TestKeyFailuresLimitedByAddress(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		p, h := newKeyed(t, client)
		_, good, err := p.Keys().Add(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		const body = `{"type":"x"}`
		limit := int(DefaultKeyFailures.Limit)
		for i := range 1000 {
			auth := "Bearer slk_" + strconv.Itoa(1e15+i) + "_" + strings.Repeat("x", 43)
			if i%3 == 0 {
				auth = "" // no key counts too
			}
			w, resp := keyPost(t, h, "198.51.100.7:"+strconv.Itoa(1000+i), auth, body)
			want, reason := 401, ""
			if i >= limit {
				want, reason = 429, "too_many_failures"
			}
			if w.Code != want || (reason != "" && resp.Reason != reason) {
				t.Fatalf("wrong key %d: %d %q, want %d %q", i, w.Code, resp.Reason, want, reason)
			}
			if want == 429 {
				ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
				if err != nil || ra < 1 || ra > 60 {
					t.Fatalf("wrong key %d: Retry-After %q, want 1 to 60 s", i, w.Header().Get("Retry-After"))
				}
			}
			if i%100 == 99 { // a valid caller on the same address meanwhile
				if w, resp := keyPost(t, h, "198.51.100.7:999", "Bearer "+good, body); w.Code != 202 {
					t.Fatalf("valid key after %d wrong ones: %d %q (%s)", i+1, w.Code, resp.Reason, resp.Error)
				}
			}
		}
		if w, resp := keyPost(t, h, "198.51.100.8:1", "Bearer slk_x", body); w.Code != 401 {
			t.Errorf("wrong key from another address: %d %q, want 401", w.Code, resp.Reason)
		}
		// An IPv6 host's /64 is one address.
		for i := range limit {
			keyPost(t, h, "[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:1", "", body)
		}
		if w, _ := keyPost(t, h, "[2001:db8:1:2:ffff::1]:1", "", body); w.Code != 429 {
			t.Errorf("the same /64 past the limit: %d, want 429", w.Code)
		}
		if w, _ := keyPost(t, h, "[2001:db8:1:3::1]:1", "", body); w.Code != 401 {
			t.Errorf("another /64: %d, want 401", w.Code)
		}
	})
}

// TestKeyRecords: Add refuses bad tenants; a record of another version
// is refused loudly, not read as no key.
func TestKeyRecords(t *testing.T) {
	client := redistest.Mini(t)
	cfg := testConfig(t, 10)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := p.Keys()
	for _, tenants := range [][]string{nil, {""}, {"a", "a"}, {strings.Repeat("t", MaxTenantLen+1)}, {"caf\u0065\u0301"}} {
		if _, _, err := keys.Add(ctx, tenants...); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("Add(%q): %v, want ErrInvalidJob", tenants, err)
		}
	}
	ak, key, err := keys.Add(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "slk_"+ak.ID+"_") {
		t.Errorf("key %q does not start with slk_<id>_", key)
	}
	stored, err := client.HGet(ctx, keys.hash, ak.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, key[len("slk_"+ak.ID+"_"):]) {
		t.Fatalf("Redis holds the secret: %s", stored)
	}
	client.HSet(ctx, keys.hash, ak.ID, strings.Replace(stored, `"v":1`, `"v":2`, 1))
	if _, err := keys.Authenticate(ctx, key); err == nil || errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), "version") {
		t.Errorf("a record of version 2: %v, want an error naming the version", err)
	}
	if _, err := keys.List(ctx); err == nil {
		t.Error("List read a record of version 2")
	}
}

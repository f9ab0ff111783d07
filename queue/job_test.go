package queue

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestTenantIDMustBeNFC: "café" spelt with a combining accent (NFD) is
// refused, by Enqueue and over HTTP, with an error that says so and
// shows the NFC spelling; before, it was a second tenant beside "café"
// in NFC, outside the policy that names that one. The NFC spelling, and
// ids that need no normalising, are accepted. A refusal writes nothing.
func TestTenantIDMustBeNFC(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	p, err := NewProducer(client, &Config{Queue: "nfc", Bound: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const nfc, nfd = "caf\u00e9", "cafe\u0301"
	for _, id := range []string{nfd, "A\u030a", "\u1100\u1161"} { // e + acute; A + ring (NFC: Å); Hangul jamo (NFC: 가)
		_, err := p.Enqueue(ctx, Job{Tenant: id, Type: "x"})
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "normalization form C (NFC)") {
			t.Errorf("tenant %q: %v; want ErrInvalidJob naming NFC", id, err)
		}
	}
	_, err = p.Enqueue(ctx, Job{Tenant: nfd, Type: "x"})
	if want := `tenant id "cafe\u0301" is not in Unicode normalization form C (NFC); normalise it first (as "caf\u00e9")`; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %v; want it to end %s", err, want)
	}
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys (%v) after refusals; want none", n, err)
	}
	for _, id := range []string{nfc, "plain", "東京", "가", "{a:b} c"} {
		if _, err := p.Enqueue(ctx, Job{Tenant: id, Type: "x"}); err != nil {
			t.Errorf("tenant %q: %v", id, err)
		}
	}
	srv := httptest.NewServer(HTTPHandler(p))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"tenant":"cafe\u0301","type":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST /enqueue with an NFD tenant: %d, want 400", resp.StatusCode)
	}
}

// TestCostIsCapped: a cost above MaxCost is refused, with the limit in
// the error, even for a job that no policy or downstream weighs (2^63-1
// was accepted); MaxCost itself is accepted there.
func TestCostIsCapped(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	p, err := NewProducer(client, &Config{Queue: "cost", Bound: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, cost := range []int64{math.MaxInt64, MaxCost + 1} {
		_, err := p.Enqueue(ctx, Job{Tenant: "t", Type: "x", Cost: cost})
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "cost must be at most 1099511627776") {
			t.Errorf("cost %d: %v; want ErrInvalidJob naming the limit", cost, err)
		}
	}
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys (%v) after refusals; want none", n, err)
	}
	if _, err := p.Enqueue(ctx, Job{Tenant: "t", Type: "x", Cost: MaxCost}); err != nil {
		t.Fatalf("cost MaxCost: %v", err)
	}
}

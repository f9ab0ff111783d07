package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAPIChargesRealCostAndRefusesBeyondTolerance: the fake API admits
// calls while its bucket is within the tolerance, charging each its real
// cost (2-8x the estimate, reported in usage.total_tokens), and refuses
// the next with 429, Retry-After and no usage.
func TestAPIChargesRealCostAndRefusesBeyondTolerance(t *testing.T) {
	a := newAPI(600_000, 20_000, 500, "above", 1, 0, 0)
	var admitted, used int64
	for range 100 {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat", strings.NewReader("{}")))
		if rec.Code == http.StatusTooManyRequests {
			if rec.Header().Get("Retry-After") == "" || strings.Contains(rec.Body.String(), "usage") {
				t.Fatalf("429 without Retry-After, or with usage: %v %q", rec.Header(), rec.Body)
			}
			break
		}
		admitted++
		c := a.calls[len(a.calls)-1].Cost
		if c < 1000 || c > 4000 || !strings.Contains(rec.Body.String(), `"total_tokens":`) {
			t.Fatalf("call %d cost %d (want 2-8x of 500) body %q", admitted, c, rec.Body)
		}
		used += c
	}
	// The bucket refuses once it holds more than 20,000 tokens: the calls
	// admitted cost between 20,000 and 20,000 plus one call (and the drain
	// in the test's few milliseconds).
	if used < 20_000 || used > 24_500 || admitted == 100 {
		t.Errorf("admitted %d calls, %d tokens, before the first 429; want just over 20,000", admitted, used)
	}
}

// TestSummarizeCountsTheSpan: only the calls within the span from the
// first count, the 429s apart.
func TestSummarizeCountsTheSpan(t *testing.T) {
	calls := []apiCall{
		{At: 0, Cost: 100},
		{At: 1_000_000, Refused: true},
		{At: 59_999_999, Cost: 50},
		{At: 60_000_000, Cost: 1000}, // after the span
	}
	s := summarize("settle", calls, time.Minute)
	if s.used != 150 || s.calls != 2 || s.refused != 1 || len(s.notes) != 0 {
		t.Errorf("%+v; want 150 tokens, 2 calls, 1 refusal, no note", s)
	}
	o := options{quota: 600_000, apiBurst: 20_000, duration: time.Minute}
	if !(summary{used: 558_000, refused: 2}).met(o) || (summary{used: 558_000, refused: 3}).met(o) || (summary{used: 557_000}).met(o) {
		t.Error("the target is at least 90% of 620,000 with at most 2 429s")
	}
}

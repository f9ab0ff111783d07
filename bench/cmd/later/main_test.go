package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	calls := []call{
		{N: 0, Late: 10_000},
		{N: 1, Late: -300_000}, // early
		{N: 0, Late: 900_000},  // a repeat: not in the lateness
		{N: 2, Late: 1_500_000},
		{N: 7, Late: 5}, // not one of the run's jobs
	}
	s := summarize("x", 4, calls)
	if s.calls != 5 || s.missing != 1 || s.repeats != 2 || s.early != 1 {
		t.Errorf("calls %d missing %d repeats %d early %d; want 5, 1, 2, 1", s.calls, s.missing, s.repeats, s.early)
	}
	if s.max != 1500*time.Millisecond || s.p50 != 10*time.Millisecond || s.earliest != -300*time.Millisecond {
		t.Errorf("max %v p50 %v earliest %v", s.max, s.p50, s.earliest)
	}
	if s.met() {
		t.Error("a run with an early start and a missing job met the targets")
	}
	var fine []call
	for n := range 100 {
		fine = append(fine, call{N: n, Late: 50_000})
	}
	fine[99].Late = 2_000_000 // one in a hundred: above p99
	if ok := summarize("x", 100, fine); !ok.met() || ok.p99 != 50*time.Millisecond {
		t.Errorf("p99 50 ms, max exactly 2 s, none early: %+v should meet the targets", ok)
	}
	fine[98].Late = 1_000_001 // two in a hundred: p99 above 1 s
	if bad := summarize("x", 100, fine); bad.met() {
		t.Errorf("p99 just above 1 s: %+v should miss the targets", bad)
	}
}

func TestDueTimesSpreadEvenly(t *testing.T) {
	o := options{jobs: 4, lead: 5 * time.Second, spread: 2 * time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 123_456_789, time.UTC)
	got := o.dueTimes(now)
	first := time.Date(2026, 1, 1, 0, 0, 5, 123_000_000, time.UTC)
	for n, d := range got {
		if want := first.Add(time.Duration(n) * 500 * time.Millisecond); !d.Equal(want) {
			t.Errorf("job %d due %v, want %v", n, d, want)
		}
	}
}

func TestRecorderMeasuresFromTheURL(t *testing.T) {
	r := newRecorder()
	due := time.Now().Add(-time.Second)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, jobURL("", 3, 2, due), nil))
	if rec.Code != http.StatusOK || len(r.calls) != 1 {
		t.Fatalf("status %d, %d calls", rec.Code, len(r.calls))
	}
	if c := r.calls[0]; c.N != 3 || c.Late < 999_000 || c.Late > 60_000_000 {
		t.Errorf("call %+v; want job 3 about 1 s late", c)
	}
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/t/a/1", nil))
	if rec.Code != http.StatusBadRequest || len(r.calls) != 1 {
		t.Errorf("a call without at: status %d, %d calls recorded", rec.Code, len(r.calls))
	}
}

package pacestat

import (
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	rootstat "github.com/sluicehq/sluice/internal/pacestat"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns arrivals at the given offsets in milliseconds.
func at(ms ...float64) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = t0.Add(time.Duration(m * float64(time.Millisecond)))
	}
	return out
}

// even returns n arrivals every gap from t0.
func even(n int, gap time.Duration) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = t0.Add(time.Duration(i) * gap)
	}
	return out
}

func TestSteadyTrimsBothEnds(t *testing.T) {
	arr := even(101, 100*time.Millisecond) // 0 .. 10 s
	w, ok := Steady(arr, time.Second)
	if !ok {
		t.Fatal("no window")
	}
	if w.Len() != 8*time.Second {
		t.Fatalf("window length %v, want 8s", w.Len())
	}
	// [1 s, 9 s): arrivals 10 .. 89.
	if w.Lo != 10 || w.Hi != 90 || w.Count() != 80 {
		t.Fatalf("window [%d, %d), want [10, 90)", w.Lo, w.Hi)
	}
	if w, ok := Steady(arr, 0); !ok || w.Lo != 0 || w.Hi != 100 {
		t.Fatalf("untrimmed window %+v, %v; want [0, 100): the last arrival is at End", w, ok)
	}
	if _, ok := Steady(even(10, 100*time.Millisecond), time.Second); ok {
		t.Fatal("a 0.9 s run has a steady window of 1 s trims")
	}
}

func TestGapsPooled(t *testing.T) {
	var g Gaps
	if !math.IsNaN(g.CV()) {
		t.Fatal("no gap has no CV")
	}
	// One run: the root package's GapCV. Gaps 1, 3, 1, 3: mean 2,
	// standard deviation 1.
	one := at(0, 1, 4, 5, 8)
	g.Add(one)
	if cv := g.CV(); math.Abs(cv-0.5) > 1e-12 || math.Abs(cv-rootstat.GapCV(one)) > 1e-12 {
		t.Fatalf("CV %v, want 0.5 (GapCV %v)", cv, rootstat.GapCV(one))
	}
	// Pooled over two runs, the pause between them is not a gap.
	g = Gaps{}
	g.Add(at(0, 1, 4))
	g.Add(at(1000, 1001, 1004))
	if cv := g.CV(); math.Abs(cv-0.5) > 1e-12 {
		t.Fatalf("pooled CV %v, want 0.5", cv)
	}
	g = Gaps{}
	g.Add(even(5, 0))
	if !math.IsNaN(g.CV()) {
		t.Fatal("gaps of 0 have no CV")
	}
}

func TestRefusedByRule(t *testing.T) {
	// 100/s (10 ms), tolerance 2 calls (20 ms).
	arr := at(0, 0, 0, 0, 10, 30, 31, 32, 33)
	got := Refused(arr, 100, 2)
	// The first three fill the tolerance (TAT 30), the fourth is early; at
	// 10 ms the TAT minus the tolerance is 10: allowed (TAT 40); 30 and 31
	// too (TAT 60); 32 and 33 are before 40.
	want := []bool{false, false, false, true, false, false, false, true, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Refused = %v, want %v", got, want)
		}
	}
	if n := CountTrue(got, 0, len(got)); n != 3 {
		t.Fatalf("CountTrue = %d", n)
	}
}

// TestRefusedMatchesServer checks the replay against the server it
// stands for: the 429s it finds in the recorded arrivals are the ones the
// server counted.
func TestRefusedMatchesServer(t *testing.T) {
	f := downstreamtest.NewServer(downstreamtest.Config{Rate: 500, Tolerance: 3})
	defer f.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				resp, err := client.Get(f.URL() + "/x")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				time.Sleep(time.Duration((g+i)%4) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	arr := f.Arrivals()
	refused := CountTrue(Refused(arr, 500, 3), 0, len(arr))
	c := f.Counts()
	if refused != c.Limited || len(arr) != c.Total {
		t.Fatalf("replay: %d refused of %d; server: %d limited of %d", refused, len(arr), c.Limited, c.Total)
	}
	if c.Limited == 0 || c.OK == 0 {
		t.Logf("the load was not mixed (%d ok, %d limited): the check is weak", c.OK, c.Limited)
	}
}

func TestQuantile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3}
	if q := Quantile(d, 0.5); q != 3 {
		t.Fatalf("median %v", q)
	}
	if q := Quantile(d, 1); q != 5 {
		t.Fatalf("max %v", q)
	}
	if q := Quantile(nil, 0.5); q != 0 {
		t.Fatalf("empty %v", q)
	}
}

package pacestat

import (
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
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
	if cv := g.CV(); math.Abs(cv-0.5) > 1e-12 || math.Abs(cv-GapCV(one)) > 1e-12 {
		t.Fatalf("CV %v, want 0.5 (GapCV %v)", cv, GapCV(one))
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

// ms returns arrivals at the given offsets in milliseconds.
func ms(offsets ...float64) []time.Time { return at(offsets...) }

// atMs returns the time o milliseconds after t0.
func atMs(o int) time.Time { return t0.Add(time.Duration(o) * time.Millisecond) }

func TestGapCV(t *testing.T) {
	steps := []struct {
		name     string
		arrivals []time.Time
		want     float64 // NaN: undefined
	}{
		{"nil", nil, math.NaN()},
		{"empty", ms(), math.NaN()},
		{"one", ms(7), math.NaN()},
		{"two at once", ms(7, 7), math.NaN()},
		{"all at once", ms(3, 3, 3), math.NaN()},
		{"two", ms(0, 100), 0},
		{"even", ms(0, 100, 200, 300, 400), 0},
		// Gaps 100 and 300: mean 200, population stddev 100.
		{"uneven pair", ms(0, 100, 400), 0.5},
		// Gaps 0 and 200: mean 100, stddev 100.
		{"double then gap", ms(0, 0, 200), 1},
		// Gaps 0, 0, 0, 400: mean 100, stddev sqrt((3*100^2+300^2)/4) = sqrt(30000).
		{"burst of four then one", ms(0, 0, 0, 0, 400), math.Sqrt(30000) / 100},
		// Gaps 10, 30, 10, 30: mean 20, stddev 10.
		{"alternating", ms(0, 10, 40, 50, 80), 0.5},
	}
	for _, s := range steps {
		got := GapCV(s.arrivals)
		switch {
		case math.IsNaN(s.want):
			if !math.IsNaN(got) {
				t.Errorf("%s: GapCV = %v, want NaN", s.name, got)
			}
		case math.Abs(got-s.want) > 1e-12:
			t.Errorf("%s: GapCV = %v, want %v", s.name, got, s.want)
		}
	}
}

func TestCount(t *testing.T) {
	a := ms(0, 100, 250, 250, 500, 999, 1000, 1500)
	steps := []struct {
		name     string
		from, to time.Time
		count    int
	}{
		{"whole second", atMs(0), atMs(1000), 6},
		{"from is inclusive, to exclusive", atMs(250), atMs(1000), 4},
		{"to includes the edge one later", atMs(250), atMs(1001), 5},
		{"before everything", atMs(-1000), atMs(0), 0},
		{"after everything", atMs(1501), atMs(3000), 0},
		{"all", atMs(-500), atMs(1500 + 1), 8},
		{"empty interval", atMs(250), atMs(250), 0},
		{"reversed interval", atMs(1000), atMs(0), 0},
		{"two seconds", atMs(0), atMs(2000), 8},
	}
	for _, s := range steps {
		if got := Count(a, s.from, s.to); got != s.count {
			t.Errorf("%s: Count = %d, want %d", s.name, got, s.count)
		}
	}
	if got := Count(ms(), atMs(0), atMs(1000)); got != 0 {
		t.Errorf("Count(empty) = %v, want 0", got)
	}
}

func TestBuckets(t *testing.T) {
	const w = 100 * time.Millisecond
	steps := []struct {
		name     string
		arrivals []time.Time
		start    time.Time
		width    time.Duration
		want     []int
	}{
		{"nil", nil, atMs(0), w, nil},
		{"empty", ms(), atMs(0), w, nil},
		{"zero width", ms(0, 1), atMs(0), 0, nil},
		{"negative width", ms(0, 1), atMs(0), -w, nil},
		{"one at start", ms(0), atMs(0), w, []int{1}},
		{"one later", ms(250), atMs(0), w, []int{0, 0, 1}},
		{"all before start", ms(0, 50), atMs(100), w, nil},
		{"some before start", ms(0, 50, 100, 150), atMs(100), w, []int{2}},
		{"edges go to the next bucket", ms(0, 99, 100, 199, 200), atMs(0), w, []int{2, 2, 1}},
		{"gap in the middle", ms(0, 10, 350), atMs(0), w, []int{2, 0, 0, 1}},
		{"start between arrivals", ms(0, 100, 200, 300), atMs(50), w, []int{1, 1, 1}},
		{"same instant", ms(40, 40, 40), atMs(0), w, []int{3}},
		{"wide bucket", ms(0, 100, 999, 1000), atMs(0), time.Second, []int{3, 1}},
	}
	for _, s := range steps {
		if got := Buckets(s.arrivals, s.start, s.width); !slices.Equal(got, s.want) || (got == nil) != (s.want == nil) {
			t.Errorf("%s: Buckets(%v) = %v, want %v", s.name, s.width, got, s.want)
		}
	}
}

// TestMonotonicReadings checks the functions on time.Now readings, which
// carry the monotonic clock.
func TestMonotonicReadings(t *testing.T) {
	base := time.Now()
	a := []time.Time{base, base.Add(10 * time.Millisecond), base.Add(20 * time.Millisecond), base.Add(30 * time.Millisecond)}
	if got := GapCV(a); got != 0 {
		t.Errorf("GapCV = %v, want 0", got)
	}
	if got := Count(a, base, base.Add(25*time.Millisecond)); got != 3 {
		t.Errorf("Count = %v, want 3", got)
	}
	if got := Buckets(a, base, 15*time.Millisecond); !slices.Equal(got, []int{2, 1, 1}) {
		t.Errorf("Buckets = %v, want [2 1 1]", got)
	}
}

package pacestat

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ms returns arrivals at the given offsets from t0, in milliseconds.
func ms(offsets ...int) []time.Time {
	a := make([]time.Time, len(offsets))
	for i, o := range offsets {
		a[i] = t0.Add(time.Duration(o) * time.Millisecond)
	}
	return a
}

func at(o int) time.Time { return t0.Add(time.Duration(o) * time.Millisecond) }

func TestMaxInWindow(t *testing.T) {
	steps := []struct {
		name     string
		arrivals []time.Time
		window   time.Duration
		want     int
	}{
		{"nil", nil, time.Second, 0},
		{"empty", ms(), time.Second, 0},
		{"one", ms(0), time.Second, 1},
		{"zero window", ms(0, 0, 0), 0, 0},
		{"negative window", ms(0, 1), -time.Second, 0},
		{"same instant", ms(5, 5, 5, 5), time.Nanosecond, 4},
		{"exactly window apart never share", ms(0, 1000), time.Second, 1},
		{"one ns inside", []time.Time{t0, t0.Add(time.Second - 1)}, time.Second, 2},
		{"chain at the edge", ms(0, 1000, 2000, 3000), time.Second, 1},
		{"evenly spaced 10/s", ms(0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100), time.Second, 10},
		{"burst at the end", ms(0, 100, 900, 950, 999, 1000, 1001), time.Second, 6},
		{"window slides past the start", ms(0, 600, 700, 800, 1500, 1550), time.Second, 5},
		{"busiest window not at an edge", ms(0, 2000, 2100, 2200, 2999, 3000, 5000), time.Second, 4},
		{"small window", ms(0, 10, 20, 25, 30, 40), 10 * time.Millisecond, 2},
		{"repeats at the edge", ms(0, 0, 1000, 1000, 1000), time.Second, 3},
	}
	for _, s := range steps {
		if got := MaxInWindow(s.arrivals, s.window); got != s.want {
			t.Errorf("%s: MaxInWindow(%v) = %d, want %d", s.name, s.window, got, s.want)
		}
	}
}

// TestMaxInWindowBruteForce checks the two-pointer scan against every
// window that starts at an arrival (the busiest window can always start at
// one).
func TestMaxInWindowBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := r.IntN(60)
		a := make([]time.Time, n)
		for i := range a {
			a[i] = t0.Add(time.Duration(r.IntN(50)) * 10 * time.Millisecond)
		}
		slices.SortFunc(a, time.Time.Compare)
		window := time.Duration(r.IntN(30)+1) * 10 * time.Millisecond
		want := 0
		for _, start := range a {
			c := 0
			for _, x := range a {
				if !x.Before(start) && x.Before(start.Add(window)) {
					c++
				}
			}
			want = max(want, c)
		}
		if got := MaxInWindow(a, window); got != want {
			t.Fatalf("trial %d: MaxInWindow(%v, %v) = %d, want %d", trial, a, window, got, want)
		}
	}
}

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

func TestCountAndRate(t *testing.T) {
	a := ms(0, 100, 250, 250, 500, 999, 1000, 1500)
	steps := []struct {
		name     string
		from, to time.Time
		count    int
		rate     float64
	}{
		{"whole second", at(0), at(1000), 6, 6},
		{"from is inclusive, to exclusive", at(250), at(1000), 4, 4 / 0.75},
		{"to includes the edge one later", at(250), at(1001), 5, 5 / 0.751},
		{"before everything", at(-1000), at(0), 0, 0},
		{"after everything", at(1501), at(3000), 0, 0},
		{"all", at(-500), at(1500 + 1), 8, 8 / 2.001},
		{"empty interval", at(250), at(250), 0, 0},
		{"reversed interval", at(1000), at(0), 0, 0},
		{"two seconds", at(0), at(2000), 8, 4},
	}
	for _, s := range steps {
		if got := Count(a, s.from, s.to); got != s.count {
			t.Errorf("%s: Count = %d, want %d", s.name, got, s.count)
		}
		if got := Rate(a, s.from, s.to); math.Abs(got-s.rate) > 1e-9 {
			t.Errorf("%s: Rate = %v, want %v", s.name, got, s.rate)
		}
	}
	if got := Rate(nil, at(0), at(1000)); got != 0 {
		t.Errorf("Rate(nil) = %v, want 0", got)
	}
	if got := Count(ms(), at(0), at(1000)); got != 0 {
		t.Errorf("Count(empty) = %v, want 0", got)
	}
}

func TestTrim(t *testing.T) {
	steps := []struct {
		name       string
		arrivals   []time.Time
		head, tail time.Duration
		want       []time.Time
	}{
		{"nil", nil, time.Second, time.Second, nil},
		{"empty", ms(), time.Second, time.Second, ms()},
		{"one, no trim", ms(5), 0, 0, ms(5)},
		{"one, trimmed away", ms(5), time.Millisecond, 0, ms()},
		{"one, tail only", ms(5), 0, time.Millisecond, ms()},
		{"no trim", ms(0, 500, 1000), 0, 0, ms(0, 500, 1000)},
		{"negative counts as zero", ms(0, 500, 1000), -time.Second, -time.Second, ms(0, 500, 1000)},
		{"first and last second", ms(0, 500, 999, 1000, 1500, 2000, 2500, 3000, 3001, 4000), time.Second, time.Second, ms(1000, 1500, 2000, 2500, 3000)},
		{"edges are kept", ms(0, 100, 200, 300), 100 * time.Millisecond, 100 * time.Millisecond, ms(100, 200)},
		{"head only", ms(0, 100, 200, 300), 150 * time.Millisecond, 0, ms(200, 300)},
		{"tail only", ms(0, 100, 200, 300), 0, 150 * time.Millisecond, ms(0, 100)},
		{"repeats at the edges", ms(0, 0, 100, 100, 200, 200), 100 * time.Millisecond, 100 * time.Millisecond, ms(100, 100)},
		{"covers the span", ms(0, 100, 200, 300), 200 * time.Millisecond, 200 * time.Millisecond, ms()},
		{"overlapping cuts", ms(0, 100, 200, 300), 250 * time.Millisecond, 250 * time.Millisecond, ms()},
		{"longer than the span", ms(0, 100), time.Hour, time.Hour, ms()},
	}
	for _, s := range steps {
		got := Trim(s.arrivals, s.head, s.tail)
		if !slices.Equal(got, s.want) || (got == nil) != (s.want == nil) {
			t.Errorf("%s: Trim(%v, %v) = %v, want %v", s.name, s.head, s.tail, got, s.want)
		}
	}
}

func TestTrimDoesNotCopy(t *testing.T) {
	a := ms(0, 100, 200, 300)
	got := Trim(a, 100*time.Millisecond, 0)
	if &got[0] != &a[1] {
		t.Fatal("Trim copied its input; it should return a subslice")
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
		{"nil", nil, at(0), w, nil},
		{"empty", ms(), at(0), w, nil},
		{"zero width", ms(0, 1), at(0), 0, nil},
		{"negative width", ms(0, 1), at(0), -w, nil},
		{"one at start", ms(0), at(0), w, []int{1}},
		{"one later", ms(250), at(0), w, []int{0, 0, 1}},
		{"all before start", ms(0, 50), at(100), w, nil},
		{"some before start", ms(0, 50, 100, 150), at(100), w, []int{2}},
		{"edges go to the next bucket", ms(0, 99, 100, 199, 200), at(0), w, []int{2, 2, 1}},
		{"gap in the middle", ms(0, 10, 350), at(0), w, []int{2, 0, 0, 1}},
		{"start between arrivals", ms(0, 100, 200, 300), at(50), w, []int{1, 1, 1}},
		{"same instant", ms(40, 40, 40), at(0), w, []int{3}},
		{"wide bucket", ms(0, 100, 999, 1000), at(0), time.Second, []int{3, 1}},
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
	if got := MaxInWindow(a, 20*time.Millisecond); got != 2 {
		t.Errorf("MaxInWindow = %d, want 2", got)
	}
	if got := GapCV(a); got != 0 {
		t.Errorf("GapCV = %v, want 0", got)
	}
	if got := Rate(a, base, base.Add(40*time.Millisecond)); math.Abs(got-100) > 1e-9 {
		t.Errorf("Rate = %v, want 100", got)
	}
	if got := Buckets(a, base, 15*time.Millisecond); !slices.Equal(got, []int{2, 1, 1}) {
		t.Errorf("Buckets = %v, want [2 1 1]", got)
	}
	if got := Trim(a, 10*time.Millisecond, 10*time.Millisecond); len(got) != 2 {
		t.Errorf("Trim kept %d, want 2", len(got))
	}
}

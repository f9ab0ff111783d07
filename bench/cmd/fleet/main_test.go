package main

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/redisinfo"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// step is one call to a quota: at ms after t0, the decision wanted.
type step struct {
	at    int
	ok    bool
	retry int // Retry-After wanted when refused
}

func runSteps(t *testing.T, q quota, steps []step) {
	t.Helper()
	for i, s := range steps {
		ok, retry := q.decide(ms(s.at))
		if ok != s.ok || (!ok && retry != s.retry) {
			t.Errorf("step %d at %d ms: ok %v, Retry-After %d; want %v, %d", i, s.at, ok, retry, s.ok, s.retry)
		}
	}
}

func TestWindow(t *testing.T) {
	runSteps(t, &window{rate: 3, span: time.Second}, []step{
		{0, true, 0},
		{0, true, 0},
		{500, true, 0},
		{999, false, 1},   // three within the last second
		{999, false, 1},   // a refusal is not logged
		{1000, true, 0},   // the two at 0 left the window exactly 1 s later
		{1000, true, 0},   // ... both of them
		{1001, false, 1},  // 500, 1000, 1000 are within it
		{1499, false, 1},  //
		{1500, true, 0},   // 500 left
		{2600, true, 0},   // the two at 1000 left at 2000, 1500 at 2500
		{2601, true, 0},   //
		{2602, true, 0},   //
		{2603, false, 1},  // three since 2600
		{10000, true, 0},  // long idle: empty again
		{10000, true, 0},  //
		{10000, true, 0},  //
		{10000, false, 1}, //
	})
}

func TestGCRA(t *testing.T) {
	// 10/s, tolerance 2: three at once after idle, then one per 100 ms.
	g := newGCRA(10, 2)
	if g.interval != 100*time.Millisecond {
		t.Fatalf("interval %v; want 100ms", g.interval)
	}
	runSteps(t, g, []step{
		{0, true, 0},     // tat 100
		{0, true, 0},     // tat 200
		{0, true, 0},     // tat 300
		{0, false, 1},    // 300-0 > 200: 100 ms early, rounded up to 1 s
		{99, false, 1},   // 1 ms early
		{100, true, 0},   // 300-100 = 200: conforms exactly; tat 400
		{150, false, 1},  //
		{200, true, 0},   // tat 500
		{1000, true, 0},  // idle: tat 1100
		{1000, true, 0},  // tat 1200
		{1000, true, 0},  // tat 1300
		{1000, false, 1}, //
		{5000, true, 0},  //
	})
	// Tolerance 0: exactly one per interval.
	runSteps(t, newGCRA(4, 0), []step{
		{0, true, 0},
		{1, false, 1},
		{249, false, 1},
		{250, true, 0},
		{499, false, 1},
		{500, true, 0},
	})
	// The interval rounds up: never more than the rate.
	if g := newGCRA(3, 0); g.interval != 333333334 {
		t.Errorf("interval at 3/s = %d ns; want 333333334", g.interval)
	}
}

func TestAPIServesAndRecords(t *testing.T) {
	clock := t0
	a := &api{q: &window{rate: 2, span: time.Second}, now: func() time.Time { return clock }}
	srv := httptest.NewServer(a)
	defer srv.Close()
	call := func(path string) *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i, want := range []int{200, 200, 429} {
		if resp := call("/api/x"); resp.StatusCode != want {
			t.Errorf("call %d: %d; want %d", i, resp.StatusCode, want)
		} else if want == 429 && resp.Header.Get("Retry-After") != "1" {
			t.Errorf("429 with Retry-After %q; want 1", resp.Header.Get("Retry-After"))
		}
	}
	clock = clock.Add(time.Second)
	if resp := call("/api/y"); resp.StatusCode != 200 {
		t.Errorf("a second later: %d; want 200", resp.StatusCode)
	}
	if resp := call("/other"); resp.StatusCode != 404 {
		t.Errorf("outside /api/: %d; want 404", resp.StatusCode)
	}
	resp, err := http.Get(srv.URL + "/arrivals")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got arrivalsJSON
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	wantAt := []int64{t0.UnixNano(), t0.UnixNano(), t0.UnixNano(), t0.Add(time.Second).UnixNano()}
	wantOK := []bool{true, true, false, true}
	if len(got.At) != 4 || len(got.OK) != 4 {
		t.Fatalf("arrivals %+v; want 4 (the 404 and /arrivals are not calls)", got)
	}
	for i := range wantAt {
		if got.At[i] != wantAt[i] || got.OK[i] != wantOK[i] {
			t.Errorf("arrival %d: %d %v; want %d %v", i, got.At[i], got.OK[i], wantAt[i], wantOK[i])
		}
	}
}

func TestMeasure(t *testing.T) {
	ok := func(n int) arrival { return arrival{At: ms(n), OK: true} }
	no := func(n int) arrival { return arrival{At: ms(n)} }
	begin := ms(-100) // the system was up 100 ms before its first call
	arr := []arrival{
		ok(0), ok(500), no(900), ok(1000), ok(2000), ok(2500),
		ok(3000), ok(4000), no(4999), no(5000), ok(7500), no(8000), ok(9000),
		ok(10001), no(10002), // after the end: left out
	}
	f := measure("sluice", arr, begin, ms(10000), 2)
	if f.start != ms(0) || f.firstCall != 100*time.Millisecond {
		t.Errorf("start %v, first call %v; want the first arrival, 100ms", f.start.Sub(t0), f.firstCall)
	}
	if f.accepted != 9 || f.refused != 4 || f.late != 2 {
		t.Errorf("accepted %d, refused %d, late %d; want 9, 4, 2", f.accepted, f.refused, f.late)
	}
	// 200s in [2 s, 10 s): 2000, 2500, 3000, 4000, 7500, 9000.
	if f.steadyRate != 6.0/8 || f.share() != 6.0/8/2 {
		t.Errorf("steady rate %v, share %v; want 0.75, 0.375", f.steadyRate, f.share())
	}
	// 4000 to 7500, with 429s in between.
	if f.silence != 3500*time.Millisecond || f.silenceAt != 4*time.Second {
		t.Errorf("silence %v at %v; want 3.5s at 4s", f.silence, f.silenceAt)
	}

	// The spell from the last 200 to the end counts, as does the one
	// from the first call (a 429) to the first 200.
	f = measure("floor", []arrival{no(0), ok(300), ok(400)}, ms(0), ms(1000), 10)
	if f.silence != 600*time.Millisecond || f.silenceAt != 400*time.Millisecond {
		t.Errorf("silence to the end: %v at %v; want 600ms at 400ms", f.silence, f.silenceAt)
	}
	f = measure("floor", []arrival{no(0), no(100), ok(700), ok(900)}, ms(0), ms(1000), 10)
	if f.silence != 700*time.Millisecond || f.silenceAt != 0 {
		t.Errorf("silence from the start: %v at %v; want 700ms at 0", f.silence, f.silenceAt)
	}
	// Too short for a steady part.
	if !math.IsNaN(f.steadyRate) {
		t.Errorf("steady rate of a 1 s run: %v; want NaN", f.steadyRate)
	}

	// No call at all: silent from begin to end.
	f = measure("sluice", nil, ms(0), ms(4000), 10)
	if f.accepted != 0 || f.silence != 4*time.Second || f.start != ms(0) || f.steadyRate != 0 {
		t.Errorf("no calls: %+v", f)
	}
	// A first call before begin (one worker called while another started).
	f = measure("sluice", []arrival{ok(-50), ok(0)}, ms(0), ms(4000), 10)
	if f.firstCall != -50*time.Millisecond || f.start != ms(-50) {
		t.Errorf("early first call: first call %v, start %v", f.firstCall, f.start.Sub(t0))
	}
}

func TestPerJob(t *testing.T) {
	f := figures{accepted: 4}
	if s, c := f.perJob(); !math.IsNaN(s) || !math.IsNaN(c) {
		t.Errorf("without Redis figures: %v, %v; want NaN", s, c)
	}
	f.redis = &redisinfo.Snapshot{Processed: 90, Commands: map[string]redisinfo.CommandStat{
		"evalsha": {Calls: 8}, "eval": {Calls: 1}, "fcall": {Calls: 1}, "evalsha_ro": {Calls: 2}, "hget": {Calls: 40}}}
	if s, c := f.perJob(); s != 3 || c != 22.5 {
		t.Errorf("per job: %v scripts, %v commands; want 3, 22.5", s, c)
	}
	f.accepted = 0
	if s, _ := f.perJob(); !math.IsNaN(s) {
		t.Errorf("no job delivered: %v; want NaN", s)
	}
}

func TestJudge(t *testing.T) {
	byName := map[string]fleetCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	fig := func(system string, steady float64, quota float64, refused int) *figures {
		return &figures{system: system, steadyRate: steady, quota: quota, refused: refused, accepted: 100,
			redis: &redisinfo.Snapshot{Processed: 2000, Commands: map[string]redisinfo.CommandStat{"evalsha": {Calls: 300}}}}
	}
	results := []caseResult{
		{c: byName["window50"], sluice: fig("sluice", 47.5, 50, 5), floor: fig("floor", 49, 50, 9)}, // exactly 95% and 5: met
		{c: byName["gcra200"], sluice: fig("sluice", 190, 200, 10), floor: fig("floor", 199, 200, 9)},
		{c: byName["gcra1000"], sluice: fig("sluice", 990, 1000, 3)}, // no floor
		{c: byName["conc4"], sluice: fig("sluice", 18.9, 20, 0)},
	}
	ts := judge(results, true)
	want := []struct {
		name        string
		judged, met bool
	}{
		{"window50", true, true},
		{"gcra200", true, false},
		{"commands", true, true}, // 3 and 20 per job: at the bound
		{"gcra1000", false, false},
		{"conc4", true, false},
	}
	if len(ts) != len(want) {
		t.Fatalf("targets %+v; want %d", ts, len(want))
	}
	for i, w := range want {
		if ts[i].name != w.name || ts[i].judged != w.judged || ts[i].met != w.met {
			t.Errorf("target %d: %s judged %v met %v; want %s %v %v", i, ts[i].name, ts[i].judged, ts[i].met, w.name, w.judged, w.met)
		}
	}
	results[0].sluice.refused = 6
	if ts := judge(results[:1], false); ts[0].met {
		t.Errorf("window50 with 6 429s met")
	}
	var b strings.Builder
	writeReport(&b, results, judge(results, true))
	for _, s := range []string{
		"| window50 | window 50/s | sluice | 100 |",
		"| window50 | ≥ 95% of the quota served, ≤ 5 429s | 95.0% served, 6 429s | no |",
		"| gcra1000 | 429s no more than the floor's | (the run lacks a system this needs) | not judged |",
		"| conc4 | ≥ 95% of 20/s | 94.5% (18.9/s) | no |",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-cases", "commands,window50", "-duration-scale", "0.25"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.cases) != 2 || o.cases[0].name != "window50" || o.cases[1].name != "gcra200" || !o.commands {
		t.Fatalf("cases %+v, commands %v; want window50 and gcra200 (for commands)", o.cases, o.commands)
	}
	if o.cases[0].duration != 10*time.Second || !o.sluice || !o.floor {
		t.Errorf("window50 scaled to %v, systems %v %v; want 10s, both", o.cases[0].duration, o.sluice, o.floor)
	}
	for _, bad := range [][]string{
		{"-cases", "nope"}, {"-systems", "asynq"}, {"-duration-scale", "0"},
		{"-cases", "gcra200", "-plot", "x.png"}, {"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestPolicyAndJobs(t *testing.T) {
	c := cases[3] // conc4
	p := policyYAML(c, "http://127.0.0.1:1", 850)
	for _, s := range []string{"bound: 1850", "base_url: http://127.0.0.1:1/api/", "rate: 20", "per: 1s", "concurrency: 4"} {
		if !strings.Contains(p, s) {
			t.Errorf("policy lacks %q:\n%s", s, p)
		}
	}
	if n := jobCount(c); n != 20*30*5/4+100 {
		t.Errorf("jobCount(conc4) = %d", n)
	}
	dir := t.TempDir()
	files, err := proc.WriteJobs(dir, 5, 2, jobLine("http://127.0.0.1:1", 2))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	if len(lines) != 5 || filepath.Dir(files[0]) != dir {
		t.Fatalf("jobs %q", lines)
	}
	var j struct {
		Tenant, Type, Downstream string
		Payload                  struct{ URL string }
	}
	if err := json.Unmarshal([]byte(lines[1]), &j); err != nil {
		t.Fatal(err)
	}
	if j.Tenant != "tenant-0" || j.Type != "sluice.http" || j.Downstream != "api" || j.Payload.URL != "http://127.0.0.1:1/api/jobs/2" {
		t.Errorf("second line of the first file: %+v", j)
	}
}

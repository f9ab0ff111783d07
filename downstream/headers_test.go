package downstream

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testNow is the clock of every table below: 2025-06-01 12:00:00.25 UTC,
// with a fraction so that dates in whole seconds round up.
var testNow = time.Date(2025, 6, 1, 12, 0, 0, 250_000_000, time.UTC)

// epoch returns testNow's Unix time plus d, as a header value in whole
// seconds (truncated, as servers send it).
func epoch(d time.Duration) string { return strconv.FormatInt(testNow.Add(d).Unix(), 10) }

func httpDate(d time.Duration) string { return testNow.Add(d).UTC().Format(http.TimeFormat) }

type durationStep struct {
	in     string
	want   time.Duration
	wantOK bool
}

func checkDuration(t *testing.T, name string, parse func(string) (time.Duration, bool), s durationStep) {
	t.Helper()
	got, ok := parse(s.in)
	if got != s.want || ok != s.wantOK {
		t.Errorf("%s(%q) = %v, %v; want %v, %v", name, s.in, got, ok, s.want, s.wantOK)
	}
	if got < 0 || got > MaxStatedDuration {
		t.Errorf("%s(%q) = %v: outside [0, MaxStatedDuration]", name, s.in, got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	parse := func(v string) (time.Duration, bool) { return parseRetryAfter(v, testNow) }
	for _, s := range []durationStep{
		{"120", 120 * time.Second, true},
		{"0", 0, true},
		{"000017", 17 * time.Second, true},
		{" \t7 \t", 7 * time.Second, true},
		// Fractions (Shopify sends "2.0") round up to a whole second.
		{"2.0", 2 * time.Second, true},
		{"2.000000000000001", 3 * time.Second, true},
		{"2.1", 3 * time.Second, true},
		{"0.001", time.Second, true},
		{"0.0", 0, true},
		// Absurd values clamp instead of overflowing.
		{"86400", 24 * time.Hour, true},
		{"9223372036854775807", MaxStatedDuration, true},
		{"99999999999999999999999999999999", MaxStatedDuration, true},
		{"2678400", MaxStatedDuration, true},
		{"2678399.5", MaxStatedDuration, true},
		// HTTP-dates, relative to testNow (which has a quarter second).
		{httpDate(30 * time.Second), 29750 * time.Millisecond, true},
		{httpDate(time.Hour), time.Hour - 250*time.Millisecond, true},
		{httpDate(-time.Hour), 0, true},
		{httpDate(0), 0, true},
		{"Sunday, 01-Jun-25 12:00:10 GMT", 9750 * time.Millisecond, true}, // RFC 850
		{"Sun Jun  1 12:00:10 2025", 9750 * time.Millisecond, true},       // asctime
		{"2025-06-01T12:00:10Z", 9750 * time.Millisecond, true},           // RFC 3339
		{"2025-06-01T14:00:10+02:00", 9750 * time.Millisecond, true},      // with offset
		{"Fri, 31 Dec 9999 23:59:59 GMT", MaxStatedDuration, true},        // far future
		{"Mon, 01 Jan 0001 00:00:00 GMT", 0, true},                        // far past
		{"Sun, 01 Jun 2025 12:00:10 GMT, Sun, 01 Jun 2025 12:00:20 GMT", 0, false},
		// Malformed.
		{"", 0, false},
		{"   ", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1e3", 0, false},
		{"5s", 0, false},
		{"5 6", 0, false},
		{"2.", 0, false},
		{".5", 0, false},
		{"0x10", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"soon", 0, false},
		{"Sun, 32 Jun 2025 12:00:10 GMT", 0, false},
		{"1,2", 0, false},
		{"５", 0, false}, // a full-width digit
	} {
		checkDuration(t, "parseRetryAfter", parse, s)
	}
}

func TestParseReset(t *testing.T) {
	parse := func(v string) (time.Duration, bool) { return parseReset(v, testNow) }
	for _, s := range []durationStep{
		// Delta-seconds below 1e9.
		{"30", 30 * time.Second, true},
		{"0", 0, true},
		{"64.57", 64570 * time.Millisecond, true}, // Discord's Reset-After
		{"0.0001", time.Millisecond, true},        // rounded up to a millisecond
		{"999999999", MaxStatedDuration, true},    // 31 years of delta: clamped
		{"3600.001", time.Hour + time.Millisecond, true},
		{"3600.0000000001", time.Hour, true}, // time.ParseDuration stops at a nanosecond
		// Unix seconds from 1e9 (GitHub, GitLab, Discord).
		{epoch(60 * time.Second), 59750 * time.Millisecond, true},
		{epoch(-60 * time.Second), 0, true},
		{"1000000000", 0, true}, // 2001: past
		{strconv.FormatInt(testNow.Unix(), 10) + ".750", 500 * time.Millisecond, true},
		{strconv.FormatInt(testNow.Unix(), 10) + ".7500001", 501 * time.Millisecond, true},
		{"999999999999", MaxStatedDuration, true}, // year 33658 in seconds
		// Unix milliseconds from 1e12.
		{strconv.FormatInt(testNow.Add(2*time.Second).UnixMilli(), 10), 2 * time.Second, true},
		{strconv.FormatInt(testNow.Add(-time.Second).UnixMilli(), 10), 0, true},
		{strconv.FormatInt(testNow.Add(2*time.Second).UnixMilli(), 10) + ".5", 2*time.Second + time.Millisecond, true},
		{"999999999999999", MaxStatedDuration, true},
		{"1000000000000000", MaxStatedDuration, true},
		{"99999999999999999999999999999", MaxStatedDuration, true},
		// Duration strings (OpenAI).
		{"1s", time.Second, true},
		{"6m0s", 6 * time.Minute, true},
		{"20ms", 20 * time.Millisecond, true},
		{"2m59.56s", 2*time.Minute + 59560*time.Millisecond, true},
		// Dates (Anthropic sends RFC 3339).
		{"2025-06-01T12:01:00Z", 59750 * time.Millisecond, true},
		{httpDate(10 * time.Second), 9750 * time.Millisecond, true},
		{"2025-06-01T11:00:00Z", 0, true},
		// Malformed.
		{"", 0, false},
		{"-30", 0, false},
		{"-6m0s", 0, false},
		{"30 seconds", 0, false},
		{"NaN", 0, false},
		{"1e10", 0, false},
		{"tomorrow", 0, false},
	} {
		checkDuration(t, "parseReset", parse, s)
	}
}

func TestParseDuration(t *testing.T) {
	for _, s := range []durationStep{
		{"1s", time.Second, true},
		{"6m0s", 6 * time.Minute, true},
		{"1h30m", 90 * time.Minute, true},
		{"1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
		{"2m59.56s", 2*time.Minute + 59560*time.Millisecond, true},
		{"20ms", 20 * time.Millisecond, true},
		{"1.5ms", 2 * time.Millisecond, true},
		{"500us", time.Millisecond, true},
		{"500µs", time.Millisecond, true},
		{"2000μs", 2 * time.Millisecond, true},
		{"1ns", time.Millisecond, true},
		{"0s", 0, true},
		{"0", 0, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"1d", 24 * time.Hour, true},
		{"1D2H", 26 * time.Hour, true},
		{" 3s ", 3 * time.Second, true},
		{"1s1s1s", 3 * time.Second, true},
		{"744h", MaxStatedDuration, true},
		{"743h59m59.9999s", MaxStatedDuration, true},
		{"100d", MaxStatedDuration, true},
		{"0.0000000001s", 0, true}, // time.ParseDuration stops at a nanosecond
		// time.ParseDuration's grammar: a dot needs digits on one side only.
		{"1.s", time.Second, true},
		{".5s", 500 * time.Millisecond, true},
		// Malformed.
		{"", 0, false},
		{"s", 0, false},
		{"-1s", 0, false},
		{"+1s", 0, false},
		{"1x", 0, false},
		{"1s2", 0, false},
		{"1 s", 0, false},
		{"1s 2m", 0, false},
		{"1e3s", 0, false},
		{"1h1d", 0, false},   // days only lead
		{"30d30d", 0, false}, // and only once
		// Beyond what time.Duration holds (292 years): malformed.
		{"99999999999999999999h", 0, false},
		{"99999999d", 0, false},
		{"NaNs", 0, false},
		{"1sec", 0, false},
	} {
		checkDuration(t, "parseDuration", parseDuration, s)
	}
}

func TestParseCount(t *testing.T) {
	for _, s := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"59", 59, true},
		{" 59 ", 59, true},
		{"5.9", 5, true}, // a count is never overstated
		{"9223372036854775807", math.MaxInt64, true},
		{"9223372036854775808", math.MaxInt64, true},
		{"184467440737095516150000", math.MaxInt64, true},
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{"ten", 0, false},
		{"1 0", 0, false},
	} {
		got, ok := parseCount(s.in)
		if got != s.want || ok != s.ok {
			t.Errorf("parseCount(%q) = %d, %v; want %d, %v", s.in, got, ok, s.want, s.ok)
		}
	}
}

func TestShopifyQuota(t *testing.T) {
	for _, s := range []struct {
		in        []string
		remaining int64
		ok        bool
	}{
		{[]string{"32/40"}, 8, true},
		{[]string{"40/40"}, 0, true},
		{[]string{" 1 / 80 "}, 79, true},
		{[]string{"0/0"}, 0, true},
		{[]string{"41/40"}, 0, true},
		{[]string{"a/b", "32/40"}, 8, true}, // the first valid line
		{[]string{""}, 0, false},
		{[]string{"32"}, 0, false},
		{[]string{"32/"}, 0, false},
		{[]string{"/40"}, 0, false},
		{[]string{"32/40/50"}, 0, false},
		{[]string{"-1/40"}, 0, false},
		{[]string{"a/b"}, 0, false},
	} {
		q, ok := shopify(http.Header{"X-Shopify-Shop-Api-Call-Limit": s.in})
		if q.Remaining != s.remaining || ok != s.ok {
			t.Errorf("shopifyQuota(%q) = %+v, %v; want remaining %d, %v", s.in, q, ok, s.remaining, s.ok)
		}
	}
}

type quotaStep struct {
	in   []string
	want []statedQuota
}

func checkQuotas(t *testing.T, name string, parse func(...string) []statedQuota, s quotaStep) {
	t.Helper()
	got := parse(s.in...)
	if len(got) == 0 && len(s.want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, s.want) {
		t.Errorf("%s(%q)\n got %+v\nwant %+v", name, s.in, got, s.want)
	}
}

// sq builds a statedQuota; remaining -1 means unknown.
func sq(remaining int64, reset time.Duration) statedQuota {
	return statedQuota{Remaining: remaining, Reset: reset}
}

func TestParseRateLimit(t *testing.T) {
	for _, s := range []quotaStep{
		// draft-08 and later.
		{[]string{`"default";r=50;t=30`}, []statedQuota{sq(50, 30*time.Second)}},
		{[]string{`"default";r=999;pk=:dHJpYWwxMjEzMjM=:`}, []statedQuota{sq(999, 0)}},
		{[]string{`"problemPolicy";r=0;t=10`}, []statedQuota{sq(0, 10*time.Second)}},
		{[]string{`"a";r=5;t=1, "b";r=0;t=60`}, []statedQuota{
			sq(5, time.Second), sq(0, time.Minute)}},
		{[]string{`"a";r=5;t=1`, `"b";r=0;t=60`}, []statedQuota{
			sq(5, time.Second), sq(0, time.Minute)}},
		{[]string{`"100-in-15min"; r=25; t=30`}, []statedQuota{sq(25, 30*time.Second)}},
		{[]string{`"x"; r=1; t=2`}, []statedQuota{sq(1, 2*time.Second)}},
		{[]string{`"x";t=5`}, []statedQuota{sq(-1, 5*time.Second)}},
		{[]string{`"x";r=1;t=99999999999`}, []statedQuota{sq(1, MaxStatedDuration)}},
		{[]string{`"x";r=2.9;t=0.001`}, []statedQuota{sq(2, time.Millisecond)}},
		{[]string{`"x";r=-0;t=-0`}, []statedQuota{sq(0, 0)}},
		// draft-07: a dictionary.
		{[]string{`limit=100, remaining=50, reset=5`}, []statedQuota{sq(50, 5*time.Second)}},
		{[]string{`limit=10, remaining=0, reset=10`}, []statedQuota{sq(0, 10*time.Second)}},
		{[]string{`limit=100`, `remaining=0`, `reset=7`}, []statedQuota{sq(0, 7*time.Second)}},
		{[]string{`limit=100 , remaining=1`}, []statedQuota{sq(1, 0)}},
		{[]string{`limit=100;foo=bar, other=3, remaining=-4, reset="5"`}, nil},
		// Malformed. RFC 9651 has no space around '=' nor before ';', no
		// upper-case key, at most 15 digits in an Integer and 3 after a
		// Decimal's dot: such a line is skipped whole.
		{[]string{`"x" ; r = 1 ; t = 2`}, nil},
		{[]string{`Limit = 100 , Remaining = 1`}, nil},
		{[]string{`"x";r=2.9;t=0.0005`}, nil},
		{[]string{`"x";r=1;t=9999999999999999`}, nil},
		{[]string{`"x";r=-1;t=-1`}, nil},
		{[]string{`"x"`}, nil},
		{[]string{`50;r=1;t=2`}, nil},
		{[]string{`"x";r=1;t=2 trailing`}, nil},
		{[]string{`"x";r=abc`}, nil},
		{[]string{`"x";r=1e3`}, nil},
		{[]string{`"x";r=NaN`}, nil},
		{[]string{`remaining=abc, reset=-1`}, nil},
		{[]string{""}, nil},
	} {
		checkQuotas(t, "parseRateLimit", rateLimitQuotas, s)
	}
}

func TestStructuredFieldMembersAreBounded(t *testing.T) {
	line := ""
	for i := range 200 {
		if i > 0 {
			line += ","
		}
		line += `"p` + strconv.Itoa(i) + `";r=` + strconv.Itoa(i+1)
	}
	if got := rateLimitQuotas(line); len(got) != sfMaxMembers {
		t.Fatalf("read %d quotas, want %d", len(got), sfMaxMembers)
	}
	var lines []string
	for i := range 200 {
		lines = append(lines, `"p`+strconv.Itoa(i)+`";r=1`)
	}
	if got := rateLimitQuotas(lines...); len(got) != sfMaxMembers {
		t.Fatalf("read %d quotas from %d lines, want %d", len(got), len(lines), sfMaxMembers)
	}
}

// hdr builds a header from name, value pairs, keeping the names exactly as
// written (not canonicalised), as a raw map would have them.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

type feedbackStep struct {
	name   string
	status int
	h      http.Header
	want   Feedback
}

// fb builds a Feedback; remaining -1 means unknown.
func fb(remaining int64, reset time.Duration) Feedback {
	return Feedback{Remaining: remaining, Reset: reset}
}

func (f Feedback) limited() Feedback { f.Refused = RateRefused; return f }

func (f Feedback) overloaded() Feedback { f.Refused = Overloaded; return f }

// statedQuota is what the tests of the parsers check of a Quota.
type statedQuota struct {
	Remaining int64
	Reset     time.Duration
}

// rateLimitQuotas is parseRateLimit's quotas as statedQuota.
func rateLimitQuotas(lines ...string) []statedQuota {
	var qs []statedQuota
	for _, q := range parseRateLimit(lines...) {
		qs = append(qs, statedQuota{q.Remaining, q.Reset})
	}
	return qs
}

// shopify is shopifyQuota's quota as a statedQuota, and whether it found one.
func shopify(h http.Header) (statedQuota, bool) {
	qs := shopifyQuota(h, testNow)
	if len(qs) == 0 {
		return statedQuota{}, false
	}
	return statedQuota{qs[0].Remaining, qs[0].Reset}, true
}

func (f Feedback) retry(d time.Duration) Feedback { f.RetryAfter, f.HasRetryAfter = d, true; return f }

func checkFeedback(t *testing.T, s feedbackStep) {
	t.Helper()
	got := ParseFeedback(s.status, s.h, testNow)
	// What these tables hold: the refusal, Retry-After and the most
	// restrictive quota's count and reset (TestParseFeedbackQuotas has
	// the rest).
	got = Feedback{Refused: got.Refused, RetryAfter: got.RetryAfter, HasRetryAfter: got.HasRetryAfter, Remaining: got.Remaining, Reset: got.Reset}
	if got != s.want {
		t.Errorf("%s: ParseFeedback(%d, %v)\n got %+v\nwant %+v", s.name, s.status, s.h, got, s.want)
	}
}

func TestParseFeedbackFamilies(t *testing.T) {
	none := fb(-1, 0)
	for _, s := range []feedbackStep{
		{"nothing", 200, nil, none},
		{"plain 429", 429, hdr(), none.limited()},
		{"plain 503", 503, hdr(), none.overloaded()},
		{"Anthropic 529", 529, hdr(), none.overloaded()},
		{"plain 403", 403, hdr(), none},
		{"429 Retry-After", 429, hdr("Retry-After", "30"),
			fb(-1, 0).limited().retry(30 * time.Second)},
		{"503 Retry-After date", 503, hdr("Retry-After", httpDate(2*time.Minute)),
			fb(-1, 0).overloaded().retry(2*time.Minute - 250*time.Millisecond)},
		{"503 Retry-After past date", 503, hdr("Retry-After", httpDate(-2*time.Minute)),
			fb(-1, 0).overloaded().retry(0)},
		{"503 malformed Retry-After", 503, hdr("Retry-After", "later"), none.overloaded()},
		{"200 Retry-After", 200, hdr("Retry-After", "5"), fb(-1, 0).retry(5 * time.Second)},
		{"Retry-After repeated", 429, hdr("Retry-After", "5", "Retry-After", "9", "Retry-After", "x"),
			fb(-1, 0).limited().retry(9 * time.Second)},
		{"Retry-After folded", 429, hdr("Retry-After", "5, 7"),
			fb(-1, 0).limited().retry(7 * time.Second)},

		// The structured fields, draft-08 and later.
		{"RateLimit with policy", 200, hdr(
			"RateLimit-Policy", `"default";q=100;w=60`,
			"RateLimit", `"default";r=50;t=30`),
			fb(50, 30*time.Second)},
		{"RateLimit exhausted", 200, hdr(
			"RateLimit-Policy", `"default";q=100;w=60`,
			"RateLimit", `"default";r=0;t=30`),
			fb(0, 30*time.Second)},
		{"RateLimit without policy", 200, hdr("RateLimit", `"default";r=1;t=7`),
			fb(1, 7*time.Second)},
		{"RateLimit: least remaining wins", 200, hdr(
			"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=90;t=30, "daily";r=3;t=40000`),
			fb(3, 40000*time.Second)},
		{"RateLimit: exhausted, longest reset wins", 200, hdr(
			"RateLimit-Policy", `"burst";q=100;w=60`, "RateLimit-Policy", `"daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=0;t=30`, "RateLimit", `"daily";r=0;t=40000`),
			fb(0, 40000*time.Second)},
		{"RateLimit on 429 with Retry-After", 429, hdr(
			"RateLimit", `"default";r=0;t=30`, "Retry-After", "45"),
			fb(0, 30*time.Second).limited().retry(45 * time.Second)},

		// The structured fields, draft-07.
		{"draft-07", 200, hdr("RateLimit", "limit=100, remaining=50, reset=5", "RateLimit-Policy", "100;w=10"),
			fb(50, 5*time.Second)},
		{"draft-07 several policies", 200, hdr(
			"RateLimit", "limit=50, remaining=0, reset=20", "RateLimit-Policy", "10;w=1, 50;w=60, 1000;w=3600"),
			fb(0, 20*time.Second)},

		// The legacy fields, drafts 00 to 06.
		{"legacy", 200, hdr("RateLimit-Limit", "100", "RateLimit-Remaining", "99", "RateLimit-Reset", "50"),
			fb(99, 50*time.Second)},
		{"legacy with policies", 200, hdr(
			"RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "1", "RateLimit-Reset", "1"),
			fb(1, time.Second)},
		{"GitLab: epoch reset", 429, hdr(
			"RateLimit-Limit", "60", "RateLimit-Remaining", "0", "RateLimit-Reset", epoch(40*time.Second),
			"RateLimit-ResetTime", httpDate(40*time.Second), "Retry-After", "40"),
			fb(0, 39750*time.Millisecond).limited().retry(40 * time.Second)},
		{"GitLab: reset time only", 200, hdr(
			"RateLimit-Remaining", "0", "RateLimit-ResetTime", httpDate(40*time.Second)),
			fb(0, 39750*time.Millisecond)},

		// OpenAI and Anthropic.
		{"OpenAI", 200, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s"),
			fb(59, time.Second)},
		{"OpenAI tokens exhausted", 429, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"),
			fb(0, 6*time.Minute).limited()},
		{"OpenAI partial", 200, hdr("x-ratelimit-remaining-requests", "3"), fb(3, 0)},
		{"Anthropic", 429, hdr(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", "2025-06-01T12:00:30Z",
			"anthropic-ratelimit-tokens-limit", "40000", "anthropic-ratelimit-tokens-remaining", "3000",
			"anthropic-ratelimit-tokens-reset", "2025-06-01T12:01:00Z", "retry-after", "30"),
			fb(0, 29750*time.Millisecond).limited().retry(30 * time.Second)},
		{"Anthropic input tokens", 200, hdr(
			"anthropic-ratelimit-input-tokens-limit", "1000", "anthropic-ratelimit-input-tokens-remaining", "0",
			"anthropic-ratelimit-input-tokens-reset", "2025-06-01T12:00:05Z"),
			fb(0, 4750*time.Millisecond)},

		// X-RateLimit-*.
		{"GitHub", 200, hdr(
			"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Used", "1",
			"X-RateLimit-Reset", epoch(time.Hour), "X-RateLimit-Resource", "core"),
			fb(4999, time.Hour-250*time.Millisecond)},
		{"GitHub primary limit: 403", 403, hdr(
			"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(10*time.Minute)),
			fb(0, 10*time.Minute-250*time.Millisecond).limited()},
		{"GitHub secondary limit: 403 Retry-After", 403, hdr(
			"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4000", "X-RateLimit-Reset", epoch(10*time.Minute),
			"Retry-After", "60"),
			fb(4000, 10*time.Minute-250*time.Millisecond).limited().retry(time.Minute)},
		{"403 that is no rate limit", 403, hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4000"),
			fb(4000, 0)},
		{"GitHub: used without remaining", 200, hdr("X-RateLimit-Limit", "60", "X-RateLimit-Used", "61"),
			fb(0, 0)},
		{"GitHub: used, limit with policies", 200, hdr("X-RateLimit-Limit", "100, 100;w=60, 50;w=1", "X-RateLimit-Used", "30"),
			fb(70, 0)}, // the first count is the limit
		{"Discord: Reset-After preferred", 429, hdr(
			"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", strconv.FormatInt(testNow.Unix()+100, 10)+".123",
			"X-RateLimit-Reset-After", "1.337", "X-RateLimit-Bucket", "abcd1234", "Retry-After", "2"),
			fb(0, 1337*time.Millisecond).limited().retry(2 * time.Second)},
		{"Discord: epoch with millis", 200, hdr(
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(testNow.Unix()+1, 10)+".123"),
			fb(0, 873*time.Millisecond)},
		{"parameters ignored", 200, hdr("X-RateLimit-Remaining", "5;comment=x", "X-RateLimit-Reset", "12;w=60"),
			fb(5, 12*time.Second)},
		{"delta reset", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "12"),
			fb(0, 12*time.Second)},
		{"epoch millis reset", 200, hdr("X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", strconv.FormatInt(testNow.Add(1500*time.Millisecond).UnixMilli(), 10)),
			fb(0, 1500*time.Millisecond)},
		{"epoch in the past", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(-time.Hour)),
			fb(0, 0)},
		{"Whoop: windows in the limit", 200, hdr(
			"X-RateLimit-Limit", "100, 100;window=60, 10000;window=86400", "X-RateLimit-Remaining", "98",
			"X-RateLimit-Reset", "3"),
			fb(98, 3*time.Second)},
		{"Twitter: X-Rate-Limit", 429, hdr(
			"x-rate-limit-limit", "900", "x-rate-limit-remaining", "0", "x-rate-limit-reset", epoch(15*time.Minute)),
			fb(0, 15*time.Minute-250*time.Millisecond).limited()},

		// Shopify.
		{"Shopify", 200, hdr("X-Shopify-Shop-Api-Call-Limit", "32/40"), fb(8, 0)},
		{"Shopify 429", 429, hdr("X-Shopify-Shop-Api-Call-Limit", "40/40", "Retry-After", "2.0"),
			fb(0, 0).limited().retry(2 * time.Second)},
		{"Shopify overfull", 200, hdr("X-Shopify-Shop-Api-Call-Limit", "41/40"), fb(0, 0)},
		{"Shopify garbage", 200, hdr("X-Shopify-Shop-Api-Call-Limit", "lots"), none},
	} {
		checkFeedback(t, s)
	}
}

func TestParseFeedbackPrecedence(t *testing.T) {
	structured := []string{"RateLimit", `"default";r=1;t=10`, "RateLimit-Policy", `"default";q=10;w=60`}
	legacy := []string{"RateLimit-Limit", "20", "RateLimit-Remaining", "2", "RateLimit-Reset", "20"}
	openai := []string{"X-Ratelimit-Limit-Requests", "30", "X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "30s"}
	anthropic := []string{"Anthropic-Ratelimit-Requests-Limit", "35", "Anthropic-Ratelimit-Requests-Remaining", "35"}
	x := []string{"X-Ratelimit-Limit", "40", "X-Ratelimit-Remaining", "4", "X-Ratelimit-Reset", "40"}
	shopify := []string{"X-Shopify-Shop-Api-Call-Limit", "45/50"}
	join := func(parts ...[]string) http.Header {
		var kv []string
		for _, p := range parts {
			kv = append(kv, p...)
		}
		return hdr(kv...)
	}
	for _, s := range []feedbackStep{
		{"all", 200, join(shopify, x, anthropic, openai, legacy, structured), fb(1, 10*time.Second)},
		{"no structured", 200, join(shopify, x, anthropic, openai, legacy), fb(2, 20*time.Second)},
		{"no legacy", 200, join(shopify, x, anthropic, openai), fb(3, 30*time.Second)},
		{"no OpenAI", 200, join(shopify, x, anthropic), fb(35, 0)},
		{"no Anthropic", 200, join(shopify, x), fb(4, 40*time.Second)},
		{"Shopify last", 200, join(shopify), fb(5, 0)},
		// A family that states only a limit or a policy states nothing of
		// what is left: the next one counts.
		{"policy alone yields", 200, join([]string{"RateLimit-Policy", `"default";q=10;w=60`}, x),
			fb(4, 40*time.Second)},
		{"limit alone yields", 200, join([]string{"RateLimit-Limit", "20"}, shopify), fb(5, 0)},
		{"limits alone: nothing known", 200, join([]string{"RateLimit-Limit", "20"}, []string{"X-RateLimit-Limit", "40"}),
			fb(-1, 0)},
		// A malformed family is skipped as a whole.
		{"malformed structured", 200, join([]string{"RateLimit", `"default";r=x;t=y`}, x),
			fb(4, 40*time.Second)},
		// Families are never mixed: the chosen one's unknowns stay unknown.
		{"no mixing", 200, join([]string{"RateLimit", `"default";r=1`}, x), fb(1, 0)},
	} {
		checkFeedback(t, s)
	}
}

func TestParseFeedbackHeaderNames(t *testing.T) {
	want := fb(0, 5*time.Second).limited().retry(7 * time.Second)
	for _, h := range []http.Header{
		hdr("X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "5", "Retry-After", "7"),
		hdr("x-ratelimit-limit", "10", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5", "retry-after", "7"),
		hdr("X-RATELIMIT-LIMIT", "10", "X-RateLimit-Remaining", "0", "x-RateLimit-reset", "5", "RETRY-AFTER", "7"),
		hdr("x-ratelimit-remaining", "0", "X-Ratelimit-Remaining", "3", "X-RateLimit-Limit", "10",
			"X-Ratelimit-Reset", "5", "Retry-After", "7"), // merged: least remaining
	} {
		checkFeedback(t, feedbackStep{"names", 429, h, want})
	}
	// The caller's map is not modified.
	h := hdr("x-ratelimit-remaining", "0", "X-Ratelimit-Remaining", "3")
	ParseFeedback(200, h, testNow)
	if len(h) != 2 || len(h["X-Ratelimit-Remaining"]) != 1 {
		t.Errorf("ParseFeedback modified its header: %v", h)
	}
}

func TestParseFeedbackMalformed(t *testing.T) {
	none := fb(-1, 0)
	for _, v := range []string{"", " ", "-1", "-0.5", "abc", "NaN", "+Inf", "1e9", "0x1F", "１", "\x00", "\"5\"", "5 5", ";", ","} {
		checkFeedback(t, feedbackStep{"malformed " + strconv.Quote(v), 200, hdr(
			"X-RateLimit-Limit", v, "X-RateLimit-Remaining", v, "X-RateLimit-Reset", v,
			"X-RateLimit-Reset-After", v, "RateLimit-Limit", v, "RateLimit-Remaining", v, "RateLimit-Reset", v,
			"X-Ratelimit-Remaining-Requests", v, "X-Ratelimit-Reset-Tokens", v, "Anthropic-Ratelimit-Tokens-Reset", v,
			"X-Shopify-Shop-Api-Call-Limit", v, "Retry-After", v, "RateLimit", v, "RateLimit-Policy", v,
		), none})
	}
	// Huge numbers clamp.
	huge := "99999999999999999999999999999999999999"
	checkFeedback(t, feedbackStep{"huge", 429, hdr(
		"X-RateLimit-Limit", huge, "X-RateLimit-Remaining", huge, "X-RateLimit-Reset", huge, "Retry-After", huge),
		fb(math.MaxInt64, MaxStatedDuration).limited().retry(MaxStatedDuration)})
	// A malformed value next to a good one in the same field is skipped.
	checkFeedback(t, feedbackStep{"mixed lines", 200, hdr(
		"X-RateLimit-Remaining", "x", "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "-3", "X-RateLimit-Reset", "9"),
		fb(4, 9*time.Second)})
}

// TestParseFeedbackOnTheResponsesClock: an absolute time (a date, an
// epoch reset) is read against the response's Date, so a host whose clock
// is an hour off reads the wait the downstream meant; only a response
// without a valid Date is read on the host's clock (testNow). The server's
// clock, serverNow, is an hour ahead of the host's (the host is slow) or
// behind it (fast).
func TestParseFeedbackOnTheResponsesClock(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour, 0} {
		serverNow := testNow.Add(skew).Truncate(time.Second) // Date has whole seconds
		date := func(d time.Duration) string { return serverNow.Add(d).UTC().Format(http.TimeFormat) }
		unix := func(d time.Duration) string { return strconv.FormatInt(serverNow.Add(d).Unix(), 10) }
		withDate := func(kv ...string) http.Header { return hdr(append(kv, "Date", date(0))...) }
		for _, s := range []feedbackStep{
			{"Retry-After date", 429, withDate("Retry-After", date(5*time.Second)),
				fb(-1, 0).limited().retry(5 * time.Second)},
			{"Retry-After date, lower-case date", 429, hdr("Retry-After", date(5*time.Second), "date", date(0)),
				fb(-1, 0).limited().retry(5 * time.Second)},
			{"Retry-After date past", 429, withDate("Retry-After", date(-5*time.Second)),
				fb(-1, 0).limited().retry(0)},
			{"Retry-After delta", 429, withDate("Retry-After", "5"),
				fb(-1, 0).limited().retry(5 * time.Second)},
			{"epoch reset", 200, withDate("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(30*time.Second)),
				fb(0, 30*time.Second)},
			{"epoch reset in milliseconds", 200, withDate("X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset", strconv.FormatInt(serverNow.Add(1500*time.Millisecond).UnixMilli(), 10)),
				fb(0, 1500*time.Millisecond)},
			{"GitLab reset time", 200, withDate("RateLimit-Remaining", "0", "RateLimit-ResetTime", date(40*time.Second)),
				fb(0, 40*time.Second)},
			{"Anthropic RFC 3339", 200, withDate("Anthropic-Ratelimit-Requests-Remaining", "0",
				"Anthropic-Ratelimit-Requests-Reset", serverNow.Add(20*time.Second).Format(time.RFC3339)),
				fb(0, 20*time.Second)},
			{"the first valid Date", 429, hdr("Date", "yesterday", "Date", date(0), "Date", date(time.Hour),
				"Retry-After", date(5*time.Second)),
				fb(-1, 0).limited().retry(5 * time.Second)},
		} {
			s.name = fmt.Sprintf("server clock %v: %s", skew, s.name)
			checkFeedback(t, s)
		}
	}
	// Without a valid Date, the host's clock: the downstream's date 5 s
	// after its own now reads as an hour and 5 s on a host an hour slow.
	ahead := testNow.Add(time.Hour + 5*time.Second).UTC().Format(http.TimeFormat)
	for _, h := range []http.Header{hdr("Retry-After", ahead), hdr("Retry-After", ahead, "Date", "Sun, 32 Jun 2025 12:00:00 GMT")} {
		checkFeedback(t, feedbackStep{"no valid Date", 429, h, fb(-1, 0).limited().retry(time.Hour + 4750*time.Millisecond)})
	}
}

// TestPauseOfSkewedHost: the reported fault. A host an hour slow, told
// Retry-After 5 s ahead of the response's Date (or an epoch reset 5 s
// ahead), pauses the fleet for 5 s, not for DefaultMaxPause; a host an
// hour fast pauses for 5 s, not the default backoff.
func TestPauseOfSkewedHost(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		server := testNow.Add(skew).Truncate(time.Second)
		date := server.UTC().Format(http.TimeFormat)
		for _, h := range []http.Header{
			{"Date": {date}, "Retry-After": {server.Add(5 * time.Second).UTC().Format(http.TimeFormat)}},
			{"Date": {date}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(server.Unix()+5, 10)}},
		} {
			if got := pauseAt(http.StatusTooManyRequests, h, testNow); got != 5*time.Second {
				t.Errorf("server clock %v, %v: pause %v, want 5s", skew, h, got)
			}
		}
	}
}

// TestParseFeedbackDoesNotCopyACanonicalHeader: a response's header map,
// canonical as net/http's client leaves it, is read in place.
func TestParseFeedbackDoesNotCopyACanonicalHeader(t *testing.T) {
	h := http.Header{"Retry-After": {"5"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"30"}}
	for i := range 1000 {
		h.Set("X-Pad-"+strconv.Itoa(i), "x")
	}
	if allocs := testing.AllocsPerRun(10, func() { ParseFeedback(429, h, testNow) }); allocs > 100 {
		t.Errorf("ParseFeedback of 1,003 canonical fields: %.0f allocations a call; want no copy of the map", allocs)
	}
}

// TestPauseOf runs whole responses through ParseFeedback and the pause
// rule, as Transport does (DefaultBackoff 1s, DefaultMaxPause 10m).
func TestPauseOf(t *testing.T) {
	exhausted := []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30"}
	with := func(kv ...string) http.Header { return hdr(append(kv, exhausted...)...) }
	for _, s := range []struct {
		name   string
		status int
		h      http.Header
		want   time.Duration
	}{
		{"OK", 200, hdr(), 0},
		{"limited, nothing said", 429, hdr(), time.Second},
		{"limited, Retry-After", 429, hdr("Retry-After", "5"), 5 * time.Second},
		{"Retry-After over Reset", 429, with("Retry-After", "5"), 5 * time.Second},
		{"limited, Reset", 429, with(), 30 * time.Second},
		{"limited, Retry-After 0, Reset", 429, with("Retry-After", "0"), 30 * time.Second},
		{"limited, Retry-After 0", 429, hdr("Retry-After", "0"), time.Second},
		{"limited, date past", 429, hdr("Retry-After", httpDate(-time.Minute)), time.Second},
		{"limited, quota left", 429, hdr("X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "30"), time.Second},
		{"limited, exhausted without reset", 429, hdr("X-RateLimit-Remaining", "0"), time.Second},
		{"limited, malformed Retry-After", 429, hdr("Retry-After", "-5"), time.Second},
		{"limited, huge Retry-After", 429, hdr("Retry-After", "1e99999"), time.Second},
		{"OK, exhausted", 200, with(), 30 * time.Second},
		{"OK, exhausted without reset", 200, hdr("X-RateLimit-Remaining", "0"), 0},
		{"OK, exhausted, past reset", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(-time.Hour)), 0},
		{"OK, quota left", 200, hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "30"), 0},
		{"OK, Retry-After ignored", 200, hdr("Retry-After", "60"), 0},
		{"capped", 429, hdr("Retry-After", "3600"), 10 * time.Minute},
		{"capped reset", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "3600"), 10 * time.Minute},
		{"absurd Retry-After", 429, hdr("Retry-After", "99999999999999999999999"), 10 * time.Minute},
		{"absurd reset", 429, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "99999999999999999999"), 10 * time.Minute},
		{"rounded up reset", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset-After", "0.0001"), time.Millisecond},
		{"Shopify 429", 429, hdr("X-Shopify-Shop-Api-Call-Limit", "40/40", "Retry-After", "2.0"), 2 * time.Second},
		{"GitHub primary", 403, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(90*time.Second)), 89750 * time.Millisecond},
		{"GitHub secondary", 403, hdr("X-RateLimit-Remaining", "10", "Retry-After", "60"), time.Minute},
		{"GitHub OK, exhausted", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(90*time.Second)), 89750 * time.Millisecond},
		{"Discord 429", 429, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset-After", "0.0625"), 63 * time.Millisecond},
		{"OpenAI 429", 429, hdr("X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "20ms"), 20 * time.Millisecond},
		{"structured 429", 429, hdr("RateLimit", `"default";r=0;t=30`), 30 * time.Second},
		{"503 says nothing", 503, hdr(), time.Second},
		{"503 Retry-After 0", 503, hdr("Retry-After", "0"), time.Second},
		{"503 with Retry-After", 503, hdr("Retry-After", "120"), 2 * time.Minute},
		{"503, exhausted", 503, with(), 30 * time.Second},
		{"500", 500, hdr(), 0},
	} {
		if got := pauseAt(s.status, s.h, testNow); got != s.want {
			t.Errorf("%s: pauseAt(%d, %v) = %v, want %v", s.name, s.status, s.h, got, s.want)
		}
	}
}

func BenchmarkParseFeedback(b *testing.B) {
	for _, s := range []struct {
		name string
		h    http.Header
	}{
		{"none", http.Header{"Content-Type": {"application/json"}, "Date": {httpDate(0)}}},
		{"github", http.Header{"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"4999"},
			"X-Ratelimit-Used": {"1"}, "X-Ratelimit-Reset": {epoch(time.Hour)}}},
		{"openai", hdr("x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59",
			"x-ratelimit-reset-requests", "1s", "x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s")},
		{"structured", http.Header{"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`},
			"Ratelimit": {`"burst";r=90;t=30, "daily";r=3;t=40000`}}},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pauseAt(http.StatusOK, s.h, testNow)
			}
		})
	}
}

// TestParseFeedbackWithoutLimitFieldsAllocatesNothing: a response that
// states no limit (most of them) costs no parse of its Date, nor any
// allocation.
func TestParseFeedbackWithoutLimitFieldsAllocatesNothing(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "Date": {httpDate(0)}, "Content-Length": {"2"},
		"X-Request-Id": {"abc"}, "Retry": {"5"}, "X-Rate": {"1"}, "Ratelimi": {"x"}}
	for _, status := range []int{200, 403, 429, 503} {
		if allocs := testing.AllocsPerRun(100, func() { ParseFeedback(status, h, testNow) }); allocs != 0 {
			t.Errorf("ParseFeedback(%d) of a response without limit fields: %.0f allocations a call, want 0", status, allocs)
		}
	}
}

// TestParseFeedbackShortcutAgrees: ParseFeedback, with its shortcut for
// responses that state no limit, reads every header as parseFeedback
// (which has none) does: random headers of the fields read, in any
// spelling, with fields that are not read, and malformed values.
func TestParseFeedbackShortcutAgrees(t *testing.T) {
	names := append([]string{"Content-Type", "Retry", "X-Rate", "Ratelimi", "Anthropic-Rate", "X-Shopify", "Date",
		"Retry-After ", "retry_after", "X-Ratelimit", "RATELIMIT-POLICY", "x-rAtElImIt-used"}, fuzzHeaderNames...)
	values := []string{"0", "5", "30", "2.0", "-1", "", "abc", "40/40", "6m0s", "1d2h", epoch(90 * time.Second),
		epoch(-time.Hour), httpDate(10 * time.Second), httpDate(-time.Minute), httpDate(0),
		`"default";r=0;t=30`, `limit=100, remaining=0, reset=30`, "5;w=60, 4", "99999999999999999999"}
	rng := rand.New(rand.NewPCG(1, 2))
	shortcut := 0
	for i := range 20000 {
		h := http.Header{}
		for range rng.IntN(5) {
			name := names[rng.IntN(len(names))]
			switch rng.IntN(3) {
			case 1:
				name = strings.ToLower(name)
			case 2:
				name = strings.ToUpper(name)
			}
			h[name] = append(h[name], values[rng.IntN(len(values))])
		}
		status := []int{200, 204, 403, 429, 500, 503}[rng.IntN(6)]
		now := testNow.Add(time.Duration(rng.IntN(7200)-3600) * time.Second)
		if !statesLimits(h) {
			shortcut++
		}
		if got, want := ParseFeedback(status, h, now), parseFeedback(status, h, now); got != want {
			t.Fatalf("case %d: ParseFeedback(%d, %v) = %+v; without the shortcut %+v", i, status, h, got, want)
		}
	}
	if shortcut < 1000 {
		t.Fatalf("only %d of 20000 cases took the shortcut", shortcut)
	}
}

// TestParseFeedbackQuotas: each vendor's own fields, with their units:
// every quota stated, its limit, and whether its reset means "full again"
// or "the window ends".
func TestParseFeedbackQuotas(t *testing.T) {
	type q = Quota
	for _, s := range []struct {
		name   string
		status int
		h      http.Header
		want   []Quota
		next   time.Duration // Feedback.Next
	}{
		{"OpenAI", 200, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "59s",
			"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6ms"),
			[]Quota{{UnitRequests, 60, 0, 59 * time.Second, true}, {UnitTokens, 150000, 149984, 6 * time.Millisecond, true}},
			984 * time.Millisecond}, // 59s/60, not 59s
		{"OpenAI tokens at 0", 429, hdr(
			"x-ratelimit-limit-tokens", "10000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"),
			[]Quota{{UnitTokens, 10000, 0, 6 * time.Minute, true}}, 36 * time.Millisecond},
		{"Azure OpenAI: whole seconds", 200, hdr(
			"x-ratelimit-limit-requests", "100", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "10"),
			[]Quota{{UnitRequests, 100, 0, 10 * time.Second, true}}, 100 * time.Millisecond},
		{"Azure OpenAI: nothing to say", 200, hdr(
			"x-ratelimit-limit-tokens", "-1", "x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0"),
			nil, 0},
		{"Anthropic: four units", 200, hdr(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", "2025-06-01T12:00:01Z",
			"anthropic-ratelimit-tokens-limit", "90000", "anthropic-ratelimit-tokens-remaining", "0",
			"anthropic-ratelimit-tokens-reset", "2025-06-01T12:01:00Z",
			"anthropic-ratelimit-input-tokens-limit", "80000", "anthropic-ratelimit-input-tokens-remaining", "100",
			"anthropic-ratelimit-input-tokens-reset", "2025-06-01T12:00:10Z",
			"anthropic-ratelimit-output-tokens-limit", "10000", "anthropic-ratelimit-output-tokens-remaining", "10000",
			"anthropic-ratelimit-output-tokens-reset", "2025-06-01T12:00:00Z"),
			[]Quota{{UnitRequests, 50, 49, 750 * time.Millisecond, true}, {UnitTokens, 90000, 0, 59750 * time.Millisecond, true},
				{UnitInputTokens, 80000, 100, 9750 * time.Millisecond, true}, {UnitOutputTokens, 10000, 10000, 0, true}},
			time.Millisecond}, // a token's 0.66 ms, rounded up
		{"GitHub: a window", 200, hdr(
			"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(time.Hour)),
			[]Quota{{"", 5000, 0, time.Hour - 250*time.Millisecond, false}}, time.Hour - 250*time.Millisecond},
		{"Twitter: a window", 200, hdr(
			"X-Rate-Limit-Limit", "900", "X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", epoch(time.Minute)),
			[]Quota{{"", 900, 0, time.Minute - 250*time.Millisecond, false}}, time.Minute - 250*time.Millisecond},
		{"draft-12: a window, the policy's quota", 200, hdr(
			"RateLimit-Policy", `"hour";q=1000;w=3600, "minute";q=50;w=60`,
			"RateLimit", `"hour";r=900;t=1800, "minute";r=0;t=20`),
			[]Quota{{"", 50, 0, 20 * time.Second, false}}, 20 * time.Second},
		{"Shopify REST: a leaky bucket", 200, hdr("X-Shopify-Shop-Api-Call-Limit", "40/40"),
			[]Quota{{"", 40, 0, 0, true}}, 0},
		{"HubSpot", 200, hdr(
			"X-HubSpot-RateLimit-Max", "110", "X-HubSpot-RateLimit-Remaining", "0",
			"X-HubSpot-RateLimit-Interval-Milliseconds", "10000",
			"X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "249000"),
			[]Quota{{"", 110, 0, 10 * time.Second, false}}, 10 * time.Second},
		{"HubSpot: the day spent", 200, hdr(
			"X-HubSpot-RateLimit-Max", "110", "X-HubSpot-RateLimit-Remaining", "100",
			"X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "0"),
			[]Quota{{"", 250000, 0, 0, false}}, 0},
		{"Salesforce", 200, hdr("Sforce-Limit-Info", "api-usage=25/15000"),
			[]Quota{{"", 15000, 14975, 0, false}}, 0},
		{"Salesforce: per app", 200, hdr("Sforce-Limit-Info", "api-usage=25/15000, per-app-api-usage=250/250(appName=sample)"),
			[]Quota{{"", 250, 0, 0, false}}, 0},
		{"absurd limits dropped", 200, hdr(
			"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "20", "X-RateLimit-Reset", "5"),
			[]Quota{{"", -1, 20, 5 * time.Second, false}}, 0},
		{"a limit of 0 dropped", 200, hdr(
			"x-ratelimit-limit-requests", "0", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"),
			[]Quota{{UnitRequests, -1, 0, time.Second, true}}, 0},
	} {
		f := ParseFeedback(s.status, s.h, testNow)
		if got := f.Quotas(); !(len(got) == 0 && len(s.want) == 0) && !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s: quotas\n got %+v\nwant %+v", s.name, got, s.want)
		}
		if got := f.Next(); got != s.next {
			t.Errorf("%s: Next() = %v, want %v", s.name, got, s.next)
		}
	}
}

// TestParseFeedbackRefusals: why a response refused its call.
func TestParseFeedbackRefusals(t *testing.T) {
	for _, s := range []struct {
		name   string
		status int
		h      http.Header
		want   Refusal
		retry  time.Duration
	}{
		{"Stripe global-concurrency", 429, hdr("Stripe-Rate-Limited-Reason", "global-concurrency"), ConcurrencyRefused, 0},
		{"Stripe endpoint-concurrency", 429, hdr("Stripe-Rate-Limited-Reason", "endpoint-concurrency"), ConcurrencyRefused, 0},
		{"Stripe global-rate", 429, hdr("Stripe-Rate-Limited-Reason", "global-rate"), RateRefused, 0},
		{"Stripe endpoint-rate", 429, hdr("Stripe-Rate-Limited-Reason", "endpoint-rate"), RateRefused, 0},
		{"Stripe resource-specific", 429, hdr("Stripe-Rate-Limited-Reason", "resource-specific"), RateRefused, 0},
		{"Stripe reason on a 200", 200, hdr("Stripe-Rate-Limited-Reason", "global-concurrency"), NotRefused, 0},
		{"OpenAI 503", 503, hdr("x-ratelimit-remaining-requests", "10"), Overloaded, 0},
		{"Anthropic 529", 529, hdr("retry-after", "3"), Overloaded, 3 * time.Second},
		{"retry-after-ms first", 429, hdr("retry-after-ms", "125", "retry-after", "1"), RateRefused, 125 * time.Millisecond},
		{"retry-after-ms rounded up", 429, hdr("retry-after-ms", "0.5"), RateRefused, time.Millisecond},
		{"retry-after-ms malformed", 429, hdr("retry-after-ms", "soon", "retry-after", "2"), RateRefused, 2 * time.Second},
		{"GitHub 403, no rate limit", 403, hdr("X-RateLimit-Remaining", "10", "X-RateLimit-Resource", "core"), NotRefused, 0},
	} {
		f := ParseFeedback(s.status, s.h, testNow)
		if f.Refused != s.want || f.RetryAfter != s.retry {
			t.Errorf("%s: refused %q, retry after %v; want %q, %v", s.name, f.Refused, f.RetryAfter, s.want, s.retry)
		}
	}
	if f := ParseFeedback(429, hdr("X-RateLimit-Resource", "search", "X-RateLimit-Remaining", "3"), testNow); f.Resource != "search" {
		t.Errorf("GitHub resource %q, want search", f.Resource)
	}
	if f := ParseFeedback(429, hdr("X-RateLimit-Resource", "a b{}", "X-RateLimit-Remaining", "3"), testNow); f.Resource != "" {
		t.Errorf("a malformed resource read as %q", f.Resource)
	}
}

// TestPauseForVendors: the pause, and whether it steps the pace down, for
// each kind of answer: a reset that means "full again" is never a pause
// of that length; a concurrency refusal or an overload never steps down.
func TestPauseForVendors(t *testing.T) {
	for _, s := range []struct {
		name   string
		status int
		h      http.Header
		pause  time.Duration
		step   bool
	}{
		{"OpenAI 200, one left of 60/min, full in 60s", 200, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m0s"),
			time.Second, false},
		{"OpenAI 429, full in 1m, retry-after-ms", 429, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m0s",
			"retry-after-ms", "125"), 125 * time.Millisecond, true},
		{"OpenAI 429, full in 1m, nothing else", 429, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m0s"),
			time.Second, true},
		{"Anthropic 429, full at a date, retry-after", 429, hdr(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", "2025-06-01T12:01:00Z", "retry-after", "2"), 2 * time.Second, true},
		{"Anthropic 200 at 0, full at a date", 200, hdr(
			"anthropic-ratelimit-requests-limit", "60", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", "2025-06-01T12:01:00Z"), 996 * time.Millisecond, false}, // 59.75s/60
		{"Anthropic 529", 529, hdr(), time.Second, false},
		{"OpenAI 503", 503, hdr(), time.Second, false},
		{"Stripe concurrency", 429, hdr("Stripe-Rate-Limited-Reason", "global-concurrency"), ConcurrencyBackoff, false},
		{"Stripe rate", 429, hdr("Stripe-Rate-Limited-Reason", "global-rate"), time.Second, true},
		{"GitHub secondary, nothing said", 429, hdr("X-RateLimit-Remaining", "4000", "X-RateLimit-Resource", "core"), time.Minute, true},
		{"GitHub secondary, Retry-After", 403, hdr("X-RateLimit-Remaining", "4000", "X-RateLimit-Resource", "core", "Retry-After", "30"),
			30 * time.Second, true},
		{"GitHub primary, a window", 403, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Resource", "core",
			"X-RateLimit-Reset", epoch(90*time.Second)), 89750 * time.Millisecond, true},
		{"Shopify 200 full: the bucket paces", 200, hdr("X-Shopify-Shop-Api-Call-Limit", "40/40"), 0, false},
		{"draft-12 200 at 0: the window", 200, hdr("RateLimit", `"default";r=0;t=30`), 30 * time.Second, false},
		{"draft-12 429: Retry-After wins", 429, hdr("RateLimit", `"default";r=0;t=30`, "Retry-After", "5"), 5 * time.Second, true},
	} {
		d, step := pauseFor(ParseFeedback(s.status, s.h, testNow))
		if d != s.pause || step != s.step {
			t.Errorf("%s: pause %v, step %v; want %v, %v", s.name, d, step, s.pause, s.step)
		}
	}
}

func TestGraphQLCost(t *testing.T) {
	for _, s := range []struct {
		body string
		want Quota
		ok   bool
	}{
		{`{"data":{},"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":46,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":954,"restoreRate":50.0}}}}`,
			Quota{Limit: 1000, Remaining: 954, Reset: 920 * time.Millisecond, Full: true}, true},
		{`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":0,"restoreRate":50}}}}`,
			Quota{Limit: 1000, Remaining: 0, Reset: 20 * time.Second, Full: true}, true},
		{`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":2000,"restoreRate":50}}}}`, Quota{}, false},
		{`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":10,"restoreRate":0}}}}`, Quota{}, false},
		{`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":10}}}}`, Quota{}, false},
		{`{"data":{}}`, Quota{}, false},
		{`not json`, Quota{}, false},
	} {
		got, ok := GraphQLCost([]byte(s.body))
		if got != s.want || ok != s.ok {
			t.Errorf("GraphQLCost(%s) = %+v, %v; want %+v, %v", s.body, got, ok, s.want, s.ok)
		}
	}
}

package downstream

import (
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The fuzz targets check properties that must hold for any input: no
// panic; every duration within [0, MaxStatedDuration] (or the cap given);
// every count -1 or non-negative; the same answer twice. Seeds are in
// testdata/fuzz/<target>/ and below.

func checkBounded(t *testing.T, what string, d time.Duration) {
	t.Helper()
	if d < 0 || d > MaxStatedDuration {
		t.Fatalf("%s = %v: outside [0, %v]", what, d, MaxStatedDuration)
	}
}

func checkCount(t *testing.T, what string, n int64) {
	t.Helper()
	if n < -1 {
		t.Fatalf("%s = %d: neither -1 nor >= 0", what, n)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{"120", "0", "2.0", "2.5", " 3 ", "-1", "1e3", "", "Sun, 01 Jun 2025 12:00:10 GMT",
		"Sunday, 01-Jun-25 12:00:10 GMT", "Sun Jun  1 12:00:10 2025", "2025-06-01T12:00:10Z",
		"99999999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(v, testNow.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		now := time.Unix(unix, 0)
		d, ok := parseRetryAfter(v, now)
		checkBounded(t, "parseRetryAfter", d)
		if !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v with ok=false", v, d)
		}
		if d2, ok2 := parseRetryAfter(v, now); d2 != d || ok2 != ok {
			t.Fatalf("parseRetryAfter(%q) not deterministic", v)
		}
		s := trimOWS(v)
		if ok && s != "" && strings.Trim(s, "0123456789.") == "" && d%time.Second != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v: delta-seconds not rounded up to a second", v, d)
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			want := MaxStatedDuration
			if n < uint64(MaxStatedDuration/time.Second) {
				want = time.Duration(n) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("parseRetryAfter(%q) = %v, %v; want %v", v, d, ok, want)
			}
		}
		if at, err := http.ParseTime(s); err == nil {
			if !ok {
				t.Fatalf("parseRetryAfter(%q) rejected an HTTP-date", v)
			}
			if diff := at.Sub(now); diff < MaxStatedDuration && (d < diff || d > max(diff, 0)+time.Millisecond) {
				t.Fatalf("parseRetryAfter(%q) at %v = %v; the date is %v away", v, now, d, diff)
			}
		}
	})
}

// FuzzParseValues covers the scalar parsers: parseReset, parseDuration,
// parseCount and shopifyQuota.
func FuzzParseValues(f *testing.F) {
	for _, v := range []string{"30", "64.57", "1470173023.123", "1748779260", "1748779260000", "1s", "6m0s",
		"20ms", "2m59.56s", "1h2m3.5s", "500µs", "1d", "2025-06-01T12:01:00Z", "Sun, 01 Jun 2025 12:00:10 GMT",
		"32/40", "-1", "", "99999999999999999999999h", "1.", ".5s"} {
		f.Add(v, testNow.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		now := time.Unix(unix, 0)
		d, ok := parseReset(v, now)
		checkBounded(t, "parseReset", d)
		if (!ok && d != 0) || d%time.Millisecond != 0 {
			t.Fatalf("parseReset(%q) = %v, %v", v, d, ok)
		}
		pd, pok := parseDuration(v)
		checkBounded(t, "parseDuration", pd)
		if (!pok && pd != 0) || pd%time.Millisecond != 0 {
			t.Fatalf("parseDuration(%q) = %v, %v", v, pd, pok)
		}
		if pok && !ok {
			t.Fatalf("parseReset(%q) rejected what parseDuration read", v)
		}
		// time.ParseDuration as an oracle, where both read the value: its
		// fractions truncate where ours round up, so allow a millisecond.
		if gd, err := time.ParseDuration(trimOWS(v)); err == nil && pok && gd >= 0 && gd < MaxStatedDuration-time.Second {
			if diff := pd - gd; diff < 0 || diff > 2*time.Millisecond {
				t.Fatalf("parseDuration(%q) = %v, time.ParseDuration = %v", v, pd, gd)
			}
		}
		n, cok := parseCount(v)
		if n < 0 || (!cok && n != 0) {
			t.Fatalf("parseCount(%q) = %d, %v", v, n, cok)
		}
		if u, err := strconv.ParseUint(trimOWS(v), 10, 64); err == nil && (!cok || n != int64(min(u, math.MaxInt64))) {
			t.Fatalf("parseCount(%q) = %d, %v; want %d", v, n, cok, u)
		}
		q, sok := shopify(http.Header{"X-Shopify-Shop-Api-Call-Limit": {v}})
		_, limit, _ := strings.Cut(v, "/")
		if bucket, _ := parseCount(limit); q.Remaining < 0 || sok && q.Remaining > bucket || (!sok && q != statedQuota{}) {
			t.Fatalf("shopifyQuota(%q) = %+v, %v", v, q, sok)
		}
	})
}

// sfQuote writes s as a Structured Field String; ok is false when s has a
// byte that a String cannot hold.
func sfQuote(s string) (string, bool) {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f {
			return "", false
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), true
}

func FuzzParseStructured(f *testing.F) {
	f.Add(`"default";r=50;t=30`, "default", uint64(50), uint64(30))
	f.Add(`"burst";r=0;t=30, "daily";r=3;t=40000`, "burst", uint64(0), uint64(1))
	f.Add(`limit=100, remaining=50, reset=5`, "x", uint64(1), uint64(1))
	f.Add(`"a,b";r=1;t=2;pk=:AAAA:`, `a"b\c`, uint64(math.MaxUint64), uint64(math.MaxUint64))
	f.Add(`(1 2);r=1, ?1;r=2, @1700000000;r=3, %"x";r=4`, "", uint64(0), uint64(0))
	f.Add(`"x";r=-1;t=1.5`, ",", uint64(7), uint64(86400))
	f.Fuzz(func(t *testing.T, rl, name string, r, sec uint64) {
		check := func(what string, qs []statedQuota) {
			t.Helper()
			if len(qs) > sfMaxMembers+1 {
				t.Fatalf("%s: %d quotas from at most %d members", what, len(qs), sfMaxMembers)
			}
			for _, q := range qs {
				checkCount(t, what+" Remaining", q.Remaining)
				checkBounded(t, what+" Reset", q.Reset)
			}
		}
		rls := rateLimitQuotas(rl)
		check("parseRateLimit", rls)
		if !reflect.DeepEqual(rls, rateLimitQuotas(rl)) {
			t.Fatal("not deterministic")
		}
		// Field lines split anywhere read as well as the whole line.
		if i := len(rl) / 2; i < len(rl) {
			check("parseRateLimit (split)", rateLimitQuotas(rl[:i], rl[i:]))
		}

		// A well-formed line, named by any String, followed by any other
		// line, reads back first. (A malformed member hides its whole
		// line: RFC 9651 is strict.) An Integer has at most 15 digits.
		quoted, ok := sfQuote(name)
		if !ok {
			return
		}
		const sfMaxInteger = 999_999_999_999_999
		r, sec = r%(sfMaxInteger+1), sec%(sfMaxInteger+1)
		rs, ss := strconv.FormatUint(r, 10), strconv.FormatUint(sec, 10)
		wantSeconds := MaxStatedDuration
		if sec < uint64(MaxStatedDuration/time.Second) {
			wantSeconds = time.Duration(sec) * time.Second
		}
		got := rateLimitQuotas(quoted+";r="+rs+";t="+ss, rl)
		want := statedQuota{Remaining: int64(r), Reset: wantSeconds}
		if len(got) == 0 || got[0] != want {
			t.Fatalf("parseRateLimit of %q;r=%s;t=%s then the line %q: %+v, want first %+v", quoted, rs, ss, rl, got, want)
		}

		// Through ParseFeedback: the member is exhausted, so it wins.
		h := http.Header{"Ratelimit": {quoted + ";r=0;t=" + ss, rl}}
		fb := ParseFeedback(http.StatusOK, h, testNow)
		checkFeedbackBounds(t, http.StatusOK, fb)
		if fb.Remaining != 0 || fb.Reset < wantSeconds {
			t.Fatalf("ParseFeedback(%v) = %+v; want the exhausted quota %q, reset at least %v", h, fb, name, wantSeconds)
		}
	})
}

func checkFeedbackBounds(t *testing.T, status int, fb Feedback) {
	t.Helper()
	checkBounded(t, "RetryAfter", fb.RetryAfter)
	checkBounded(t, "Reset", fb.Reset)
	checkCount(t, "Remaining", fb.Remaining)
	if fb.RetryAfter%time.Millisecond != 0 || fb.Reset%time.Millisecond != 0 {
		t.Fatalf("%+v: a duration not rounded up to a millisecond", fb)
	}
	if !fb.HasRetryAfter && fb.RetryAfter != 0 {
		t.Fatalf("RetryAfter %v without HasRetryAfter", fb.RetryAfter)
	}
	switch status {
	case http.StatusTooManyRequests:
		if fb.Refused != RateRefused && fb.Refused != ConcurrencyRefused {
			t.Fatalf("a 429 is refused for %q", fb.Refused)
		}
	case http.StatusServiceUnavailable, statusOverloaded:
		if fb.Refused != Overloaded {
			t.Fatalf("a %d is refused for %q", status, fb.Refused)
		}
	case http.StatusForbidden:
		if fb.Refused != NotRefused && fb.Refused != RateRefused {
			t.Fatalf("a 403 is refused for %q", fb.Refused)
		}
	default:
		if fb.Refused != NotRefused {
			t.Fatalf("status %d is refused for %q", status, fb.Refused)
		}
	}
	if len(fb.Quotas()) > maxQuotas {
		t.Fatalf("%d quotas", len(fb.Quotas()))
	}
	for _, q := range fb.Quotas() {
		checkCount(t, "Quota.Remaining", q.Remaining)
		checkBounded(t, "Quota.Reset", q.Reset)
		checkBounded(t, "Quota.Next", q.Next())
		if q.Limit == 0 || q.Limit < -1 || q.Limit >= 0 && q.Limit < q.Remaining {
			t.Fatalf("%+v: an absurd limit kept", q)
		}
		if q.Next() > q.Reset {
			t.Fatalf("%+v: the next unit after the reset", q)
		}
	}
}

// fuzzHeaderNames are the fields ParseFeedback reads, and one it does not.
var fuzzHeaderNames = []string{
	"Retry-After", "RateLimit", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"RateLimit-ResetTime", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Used", "X-RateLimit-Reset",
	"X-RateLimit-Reset-After", "X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset",
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
	"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
	"anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
	"X-Shopify-Shop-Api-Call-Limit", "X-Unrelated", "Date",
	"Retry-After-Ms", "Stripe-Rate-Limited-Reason", "X-RateLimit-Resource", "anthropic-ratelimit-tokens-limit",
	"X-HubSpot-RateLimit-Max", "X-HubSpot-RateLimit-Remaining", "X-HubSpot-RateLimit-Interval-Milliseconds",
	"X-HubSpot-RateLimit-Daily-Remaining", "Sforce-Limit-Info",
}

// fuzzHeaderName picks a name by n's low bits and spells it by its high
// bits: as listed, lower-case or upper-case.
func fuzzHeaderName(n uint8) string {
	name := fuzzHeaderNames[int(n&0x3f)%len(fuzzHeaderNames)]
	switch n >> 6 {
	case 1:
		return strings.ToLower(name)
	case 2:
		return strings.ToUpper(name)
	}
	return name
}

func FuzzParseFeedback(f *testing.F) {
	f.Add(429, uint8(0), "30", uint8(1), `"default";r=0;t=30`, uint8(2), `"default";q=100;w=60`, testNow.Unix())
	f.Add(403, uint8(8), "0", uint8(10), "1748779260", uint8(7), "5000", testNow.Unix())
	f.Add(200, uint8(17), "0", uint8(18), "6m0s", uint8(0x40|15), "60", testNow.Unix())
	f.Add(503, uint8(0x80), "Sun, 01 Jun 2025 12:00:10 GMT", uint8(26), "40/40", uint8(11), "64.57", int64(0))
	f.Add(429, uint8(0), "99999999999999999999", uint8(9), "-1", uint8(4), "abc", int64(math.MinInt64))
	f.Add(429, uint8(0), "Sun, 01 Jun 2025 13:00:05 GMT", uint8(28), "Sun, 01 Jun 2025 13:00:00 GMT", uint8(10), "1748782830", testNow.Unix())
	f.Add(429, uint8(29), "125.5", uint8(30), "global-concurrency", uint8(37), "api-usage=25/15000", testNow.Unix())
	f.Add(529, uint8(34), "0", uint8(35), "10000", uint8(33), "110", testNow.Unix())
	f.Fuzz(func(t *testing.T, status int, n1 uint8, v1 string, n2 uint8, v2 string, n3 uint8, v3 string, unix int64) {
		h := http.Header{}
		for _, kv := range []struct {
			n uint8
			v string
		}{{n1, v1}, {n2, v2}, {n3, v3}} {
			name := fuzzHeaderName(kv.n)
			h[name] = append(h[name], kv.v)
		}
		before := http.Header{}
		for k, v := range h {
			before[k] = append([]string(nil), v...)
		}
		now := time.Unix(unix, 0)
		fb := ParseFeedback(status, h, now)
		checkFeedbackBounds(t, status, fb)
		if fbs := parseFeedback(status, h, now); fbs != fb {
			t.Fatalf("ParseFeedback reads %+v; without its shortcut, %+v", fb, fbs)
		}
		if !reflect.DeepEqual(h, before) {
			t.Fatalf("ParseFeedback changed its header: %v, was %v", h, before)
		}
		if fb2 := ParseFeedback(status, h, now); fb2 != fb {
			t.Fatalf("not deterministic: %+v then %+v", fb, fb2)
		}
		// With a valid Date, the host's clock plays no part.
		if _, dated := responseDate(canonicalHeader(h)); dated {
			if fbl := ParseFeedback(status, h, now.Add(-time.Hour)); fbl != fb {
				t.Fatalf("with a Date, the host's clock changed the reading: %+v, then %+v", fb, fbl)
			}
		}
		// Canonical and raw spellings of the same names read the same.
		if fbc := ParseFeedback(status, canonicalHeader(h), now); fbc != fb {
			t.Fatalf("canonical header reads %+v, raw %+v", fbc, fb)
		}

		p := pauseAt(status, h, now)
		if p < 0 || p > DefaultMaxPause || p%time.Millisecond != 0 {
			t.Fatalf("%+v: pause %v: outside [0, %v] or not whole milliseconds", fb, p, DefaultMaxPause)
		}
		refused := fb.Refused != NotRefused
		if !refused && fb.Next() == 0 && p != 0 {
			t.Fatalf("%+v: pause %v for a response that asks for no pause", fb, p)
		}
		if refused && p == 0 {
			t.Fatalf("%+v: no pause for a refusal", fb)
		}
	})
}

// FuzzGraphQLCost: whatever the body, a throttle status read is a quota
// within bounds, refilling to full: never a stall.
func FuzzGraphQLCost(f *testing.F) {
	f.Add([]byte(`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":954,"restoreRate":50.0}}}}`))
	f.Add([]byte(`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":1e300,"currentlyAvailable":0,"restoreRate":1e-300}}}}`))
	f.Add([]byte(`{"extensions":{"cost":{"throttleStatus":{"maximumAvailable":-1,"currentlyAvailable":-5,"restoreRate":0}}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		q, ok := GraphQLCost(body)
		if !ok {
			if q != (Quota{}) {
				t.Fatalf("GraphQLCost(%q) = %+v with ok=false", body, q)
			}
			return
		}
		checkBounded(t, "Reset", q.Reset)
		checkBounded(t, "Next", q.Next())
		if q.Limit < 1 || q.Remaining < 0 || q.Remaining > q.Limit || !q.Full || q.Reset%time.Millisecond != 0 {
			t.Fatalf("GraphQLCost(%q) = %+v", body, q)
		}
	})
}

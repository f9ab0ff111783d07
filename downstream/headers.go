package downstream

import (
	"cmp"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// MaxStatedDuration bounds every duration read from a header: a larger one
// (a Retry-After of a billion seconds, a date in the year 9999) reads as
// MaxStatedDuration. 31 days keeps a monthly quota's reset intact.
const MaxStatedDuration = 31 * 24 * time.Hour

// Feedback is what one HTTP response says about the caller's rate limit:
// what sluice needs to decide a pause.
type Feedback struct {
	// Limited reports a response that refused the call for its rate:
	// status 429; 503 with Retry-After; or 403 with Retry-After or with a
	// remaining quota of 0, as GitHub answers an exhausted limit.
	Limited bool
	// RetryAfter is the wait that Retry-After asks for (a date already
	// past reads as 0); HasRetryAfter reports a valid Retry-After.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Remaining is the units left in the current window, -1 when unknown;
	// Reset the time until the quota refills, 0 when unknown.
	Remaining int64
	Reset     time.Duration
}

// ParseFeedback reads a response's status and headers. It never fails: a
// malformed value is ignored and its field stays unknown. Header names
// match case-insensitively. Every duration is a whole number of
// milliseconds (rounded up), at most MaxStatedDuration.
//
// An absolute time the response states (a Retry-After or RateLimit-
// ResetTime date, an epoch reset, an RFC 3339 reset) is on the
// downstream's clock, so it is read against the response's Date header,
// on the same clock: Retry-After minus Date is the wait, whatever the
// host's clock says. Only a response without a valid Date is read
// against now, the host's clock. Date has whole seconds, and a server
// writes it rounded down, so a wait read against it is up to a second
// long, never short. Delta values (Retry-After: 30, reset=30) need no
// clock.
//
// Remaining and Reset come from one header family, the first in this
// order that states a remaining quota or a reset: RateLimit (draft-07
// on), RateLimit-Remaining and -Reset (drafts 00 to 06), OpenAI's
// x-ratelimit-*-{requests,tokens}, Anthropic's anthropic-ratelimit-*,
// X-RateLimit-* (GitHub, Discord) or X-Rate-Limit-* (Twitter), and
// Shopify's X-Shopify-Shop-Api-Call-Limit. Families are never mixed. Of
// several quotas in a family (RateLimit policies, requests and tokens),
// the most restrictive is reported: the least remaining, then the longest
// reset.
func ParseFeedback(status int, h http.Header, now time.Time) Feedback {
	if !statesLimits(h) {
		// Nothing below would read a field: Date is read only to date
		// the others. Most responses take this path.
		return Feedback{Limited: status == http.StatusTooManyRequests, Remaining: -1}
	}
	return parseFeedback(status, h, now)
}

// limitPrefixes start the name of every field that parseFeedback reads
// but Date, in lower case: Retry-After, and each family's fields.
var limitPrefixes = []string{"retry-after", "ratelimit", "x-ratelimit-", "x-rate-limit-", "anthropic-ratelimit-", "x-shopify-shop-api-call-limit"}

// statesLimits reports whether h has a field, in any case, whose name
// starts with one of limitPrefixes: false means parseFeedback would find
// none of the fields it reads. A superset of those fields, so that a
// false is always right.
func statesLimits(h http.Header) bool {
	for k := range h {
		for _, p := range limitPrefixes {
			if len(k) >= len(p) && strings.EqualFold(k[:len(p)], p) {
				return true
			}
		}
	}
	return false
}

// parseFeedback is ParseFeedback without its shortcut.
func parseFeedback(status int, h http.Header, now time.Time) Feedback {
	h = canonicalHeader(h)
	if date, ok := responseDate(h); ok {
		now = date
	}
	f := Feedback{Remaining: -1}
	f.RetryAfter, f.HasRetryAfter = longest(h.Values("Retry-After"), now, parseRetryAfter)
	for _, read := range families {
		if q, ok := read(h, now); ok {
			f.Remaining, f.Reset = q.Remaining, q.Reset
			break
		}
	}
	switch status {
	case http.StatusTooManyRequests:
		f.Limited = true
	case http.StatusServiceUnavailable:
		f.Limited = f.HasRetryAfter
	case http.StatusForbidden:
		f.Limited = f.HasRetryAfter || f.Remaining == 0
	}
	return f
}

// statedQuota is one quota as a downstream states it: -1 and 0 mean
// unknown, as in Feedback.
type statedQuota struct {
	Remaining int64
	Reset     time.Duration
}

// families, in ParseFeedback's order of precedence. Each reads its most
// restrictive quota, or false when it states no remaining quota nor reset.
var families = []func(h http.Header, now time.Time) (statedQuota, bool){
	structuredQuota,
	// Drafts 00 to 06; RateLimit-ResetTime is GitLab's date.
	fields(fieldSet{remaining: "RateLimit-Remaining", reset: []string{"RateLimit-Reset", "RateLimit-ResetTime"}}),
	fields(kind("X-RateLimit-%s-Requests"), kind("X-RateLimit-%s-Tokens")), // OpenAI
	fields(kind("Anthropic-RateLimit-Requests-%s"), kind("Anthropic-RateLimit-Tokens-%s"),
		kind("Anthropic-RateLimit-Input-Tokens-%s"), kind("Anthropic-RateLimit-Output-Tokens-%s")),
	// Reset-After (Discord) is a delta, immune to clock skew: before Reset.
	fields(
		fieldSet{limit: "X-RateLimit-Limit", remaining: "X-RateLimit-Remaining", used: "X-RateLimit-Used",
			reset: []string{"X-RateLimit-Reset-After", "X-RateLimit-Reset"}},
		fieldSet{remaining: "X-Rate-Limit-Remaining", reset: []string{"X-Rate-Limit-Reset"}}),
	shopifyQuota,
}

// fieldSet names the fields of one quota. Of the reset fields, the first
// with a readable value counts.
type fieldSet struct {
	remaining   string
	limit, used string // read when remaining is absent: limit - used (GitHub)
	reset       []string
}

// kind names the fields of one kind of units by a pattern with %s for
// Remaining and Reset.
func kind(pattern string) fieldSet {
	f := func(part string) string { return strings.Replace(pattern, "%s", part, 1) }
	return fieldSet{remaining: f("Remaining"), reset: []string{f("Reset")}}
}

// fields reads a family with a field per count or reset.
func fields(sets ...fieldSet) func(http.Header, time.Time) (statedQuota, bool) {
	return func(h http.Header, now time.Time) (statedQuota, bool) {
		var qs []statedQuota
		for _, fs := range sets {
			q := statedQuota{Remaining: minCount(h.Values(fs.remaining))}
			if fs.used != "" && q.Remaining < 0 {
				if used, limit := minCount(h.Values(fs.used)), limitField(h.Values(fs.limit)); used >= 0 && limit >= 0 {
					q.Remaining = max(limit-used, 0)
				}
			}
			for _, r := range fs.reset {
				var ok bool
				if q.Reset, ok = longest(h.Values(r), now, parseReset); ok {
					break
				}
			}
			qs = append(qs, q)
		}
		return pick(qs)
	}
}

// structuredQuota reads RateLimit (draft-07 on).
func structuredQuota(h http.Header, _ time.Time) (statedQuota, bool) {
	return pick(parseRateLimit(h.Values("RateLimit")...))
}

// shopifyQuota reads the first valid X-Shopify-Shop-Api-Call-Limit:
// "32/40" is 32 calls used of a bucket of 40.
func shopifyQuota(h http.Header, _ time.Time) (statedQuota, bool) {
	for _, v := range h.Values("X-Shopify-Shop-Api-Call-Limit") {
		a, b, _ := strings.Cut(v, "/")
		used, uok := parseCount(a)
		limit, lok := parseCount(b)
		if uok && lok {
			return statedQuota{Remaining: max(limit-used, 0)}, true
		}
	}
	return statedQuota{}, false
}

// pick returns the most restrictive of the quotas that state a remaining
// count or a reset: the least remaining (unknown, -1, counts as plenty),
// then the longest reset; the first on a tie; false for none.
func pick(qs []statedQuota) (statedQuota, bool) {
	qs = slices.DeleteFunc(qs, func(q statedQuota) bool { return q.Remaining < 0 && q.Reset <= 0 })
	if len(qs) == 0 {
		return statedQuota{}, false
	}
	return slices.MinFunc(qs, func(a, b statedQuota) int {
		return cmp.Or(cmp.Compare(uint64(a.Remaining), uint64(b.Remaining)), cmp.Compare(b.Reset, a.Reset))
	}), true
}

// parseRateLimit reads RateLimit lines: "default";r=50;t=30 (draft-08),
// a quota per named item with r= or t=, or limit=100, remaining=50,
// reset=30 (draft-07), one quota. Resets are delta-seconds.
func parseRateLimit(lines ...string) []statedQuota {
	var qs []statedQuota
	dict, inDict := statedQuota{Remaining: -1}, false
	for _, m := range sfMembers(lines) {
		n, isNumber := sfCount(m.Value)
		switch {
		case m.key == "":
			_, isString := m.Value.(string)
			_, isToken := m.Value.(httpsfv.Token) // a name, leniently
			r, hasR := sfCount(m.param("r"))
			t, hasT := sfSeconds(m.param("t"))
			if (isString || isToken) && (hasR || hasT) {
				qs = append(qs, statedQuota{Remaining: r, Reset: t})
			}
		case m.key == "remaining" && isNumber:
			dict.Remaining, inDict = n, true
		case m.key == "reset" && isNumber:
			dict.Reset, inDict = sfSeconds(m.Value)
		}
	}
	if inDict {
		qs = append(qs, dict)
	}
	return qs
}

// limitField reads a limit: the first count of an RFC 9651 List, as in
// "100, 100;w=60, 1000;w=3600" (drafts 00 to 05; Whoop), else (no List:
// over 15 digits, say) the least count.
func limitField(lines []string) int64 {
	for _, m := range sfMembers(lines) {
		if n, ok := sfCount(m.Value); ok && m.key == "" {
			return n
		}
	}
	return minCount(lines)
}

// minCount reads the least count among the lines' comma-separated members,
// parameters dropped; -1 if none.
func minCount(lines []string) int64 {
	least := int64(-1)
	for _, line := range lines {
		for _, s := range plainMembers(line) {
			if n, ok := parseCount(s); ok && (least < 0 || n < least) {
				least = n
			}
		}
	}
	return least
}

// plainMembers splits a line at its commas, dropping each member's
// parameters: "5;w=60, 4" reads as "5" and " 4".
func plainMembers(line string) []string {
	ms := strings.Split(line, ",")
	for i, s := range ms {
		ms[i], _, _ = strings.Cut(s, ";")
	}
	return ms
}

// longest reads the longest duration among the lines, each read whole
// first (an HTTP-date has a comma), else member by member.
func longest(lines []string, now time.Time, parse func(string, time.Time) (time.Duration, bool)) (d time.Duration, found bool) {
	for _, line := range lines {
		vs := []string{line}
		if _, ok := parse(line, now); !ok {
			vs = plainMembers(line)
		}
		for _, v := range vs {
			if v1, ok := parse(v, now); ok {
				d, found = max(d, v1), true
			}
		}
	}
	return d, found
}

// parseRetryAfter reads delta-seconds, whose fraction ("2.0", as Shopify
// sends) rounds up to a second, or a date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	whole, frac, ok := decimal(v)
	if !ok {
		return parseDate(v, now)
	}
	d := time.Duration(min(whole, uint64(MaxStatedDuration/time.Second))) * time.Second
	if strings.Trim(frac, "0") != "" {
		d = min(d+time.Second, MaxStatedDuration)
	}
	return d, true
}

// parseReset reads a reset value: a bare number, which is delta-seconds
// below 1e9 (as a delta, 31 years), Unix seconds from 1e9 (2001) and Unix
// milliseconds from 1e12, with a fraction as Discord sends it; a duration
// ("6m0s", OpenAI); or a date (Anthropic's RFC 3339).
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	whole, _, ok := decimal(v)
	switch {
	case !ok:
		if d, ok := parseDuration(v); ok {
			return d, true
		}
		return parseDate(v, now)
	case whole >= 1e15: // the year 33658 in milliseconds
		return MaxStatedDuration, true
	case whole >= 1e12:
		return untilEpoch(v+"ms", now), true
	case whole >= 1e9:
		return untilEpoch(v+"s", now), true
	}
	return parseDuration(v)
}

// untilEpoch returns the time from now until a Unix time written as a
// duration ("1748779260.5s").
func untilEpoch(since string, now time.Time) time.Duration {
	d, err := time.ParseDuration(since)
	if err != nil { // beyond the year 2262
		return MaxStatedDuration
	}
	return ceilDuration(time.Unix(0, 0).Add(d).Sub(now))
}

// parseDuration reads a duration with time.ParseDuration ("6m0s", "20ms"
// from OpenAI and Groq), and also a bare number of seconds ("1.5"), a
// leading count of days ("1d2h") and upper-case units. Signs, and values
// beyond what time.Duration holds, are malformed.
func parseDuration(v string) (time.Duration, bool) {
	s := strings.ToLower(trimOWS(v))
	if s == "" || strings.ContainsAny(s, "+-") {
		return 0, false
	}
	if _, _, ok := decimal(s); ok {
		s += "s"
	}
	var days time.Duration
	if n, rest, ok := strings.Cut(s, "d"); ok {
		d, err := time.ParseDuration(n + "h")
		if _, _, ok := decimal(n); !ok || err != nil {
			return 0, false
		}
		days = 24 * min(d, MaxStatedDuration)
		if s = rest; s == "" {
			s = "0"
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, false
	}
	return ceilDuration(days + min(d, MaxStatedDuration)), true
}

// parseDate reads an HTTP-date (any of its three forms) or an RFC 3339
// time as the time from now until it.
func parseDate(v string, now time.Time) (time.Duration, bool) {
	t, err := http.ParseTime(v)
	if err != nil {
		t, err = time.Parse(time.RFC3339Nano, v)
	}
	if err != nil {
		return 0, false
	}
	return ceilDuration(t.Sub(now)), true
}

// parseCount reads a count, dropping a fraction (a count is never
// overstated), at most math.MaxInt64.
func parseCount(v string) (int64, bool) {
	whole, _, ok := decimal(trimOWS(v))
	return int64(min(whole, math.MaxInt64)), ok
}

// decimal splits DIGIT+ ["." DIGIT+] into its whole part (at most
// math.MaxUint64) and its fraction's digits.
func decimal(s string) (whole uint64, frac string, ok bool) {
	w, frac, hasDot := strings.Cut(s, ".")
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	if !digits(w) || hasDot && !digits(frac) {
		return 0, "", false
	}
	whole, _ = strconv.ParseUint(w, 10, 64) // out of range: math.MaxUint64
	return whole, frac, true
}

// ceilDuration rounds d up to a millisecond (a pause is never shorter than
// asked for), within [0, MaxStatedDuration].
func ceilDuration(d time.Duration) time.Duration {
	return (min(max(d, 0), MaxStatedDuration) + time.Millisecond - 1).Truncate(time.Millisecond)
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

// responseDate reads the first valid Date of a canonical header.
func responseDate(h http.Header) (time.Time, bool) {
	for _, v := range h.Values("Date") {
		if t, err := http.ParseTime(trimOWS(v)); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// canonicalHeader returns h when its keys are canonical already (as
// net/http's client leaves a response's), else a copy of h that merges
// the values of keys differing only in case, in key order. A response's
// header map may be large: it is not copied when it need not be.
func canonicalHeader(h http.Header) http.Header {
	canonical := true
	for k := range h {
		if http.CanonicalHeaderKey(k) != k {
			canonical = false
			break
		}
	}
	if canonical {
		return h
	}
	c := make(http.Header, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		ck := http.CanonicalHeaderKey(k)
		c[ck] = append(c[ck], h[k]...)
	}
	return c
}

// sfMaxMembers is the most members read from one field.
const sfMaxMembers = 64

// sfMember is an Item of a structured field, with its key when it is a
// Dictionary's.
type sfMember struct {
	key string
	httpsfv.Item
}

// sfMembers reads each line as an RFC 9651 List, or failing that a
// Dictionary (RateLimit in draft-07), so that a malformed line hides only
// itself. Inner lists are dropped.
func sfMembers(lines []string) []sfMember {
	var out []sfMember
	add := func(key string, m httpsfv.Member) {
		if it, ok := m.(httpsfv.Item); ok && len(out) < sfMaxMembers {
			out = append(out, sfMember{key, it})
		}
	}
	for _, line := range lines {
		line = trimOWS(line)
		if l, err := httpsfv.UnmarshalList([]string{line}); err == nil {
			for _, m := range l {
				add("", m)
			}
		} else if d, err := httpsfv.UnmarshalDictionary([]string{line}); err == nil {
			for _, k := range d.Names() {
				m, _ := d.Get(k)
				add(k, m)
			}
		}
	}
	return out
}

// param returns the member's parameter k; nil when absent.
func (m sfMember) param(k string) any {
	v, _ := m.Params.Get(k)
	return v
}

// sfNumber reads a non-negative Integer or Decimal; 0 and false for
// anything else. An Integer has at most 15 digits: float64 holds it exactly.
func sfNumber(v any) (float64, bool) {
	n, ok := v.(float64)
	if i, isInt := v.(int64); isInt {
		n, ok = float64(i), true
	}
	return max(n, 0), ok && n >= 0
}

// sfCount reads a number as a count, dropping its fraction; -1 and false
// when it is none.
func sfCount(v any) (int64, bool) {
	n, ok := sfNumber(v)
	if !ok {
		return -1, false
	}
	return int64(n), true
}

// sfSeconds reads a number as seconds (a Decimal has at most 3 fractional
// digits), at most MaxStatedDuration.
func sfSeconds(v any) (time.Duration, bool) {
	n, ok := sfNumber(v)
	return time.Duration(min(math.Round(n*1000), float64(MaxStatedDuration/time.Millisecond))) * time.Millisecond, ok
}

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
// MaxStatedDuration. 31 days keeps a monthly quota's window intact.
const MaxStatedDuration = 31 * 24 * time.Hour

// Header families, as reported in Feedback.Source. The set is closed, so
// Source is safe as a metric label.
const (
	SourceNone       = "none"        // the response said nothing of its limits
	SourceRetryAfter = "retry-after" // only Retry-After spoke
	// RateLimit and RateLimit-Policy: lists ("default";r=50;t=30, draft-08
	// on) or a dictionary (limit=100, remaining=50, reset=30, draft-07).
	SourceRateLimit       = "ratelimit"
	SourceRateLimitLegacy = "ratelimit-legacy" // RateLimit-Limit, -Remaining, -Reset (drafts 00 to 06)
	SourceOpenAI          = "openai"           // x-ratelimit-{limit,remaining,reset}-{requests,tokens}
	SourceAnthropic       = "anthropic"        // anthropic-ratelimit-{requests,tokens,...}-{limit,remaining,reset}
	SourceXRateLimit      = "x-ratelimit"      // X-RateLimit-* (GitHub, Discord) or X-Rate-Limit-* (Twitter)
	SourceShopify         = "shopify"          // X-Shopify-Shop-Api-Call-Limit: "32/40"
)

// Feedback is what one HTTP response says about the caller's rate limit.
type Feedback struct {
	// Limited reports a response that refused the call for its rate:
	// status 429; 503 with Retry-After; or 403 with Retry-After or with a
	// remaining quota of 0, as GitHub answers an exhausted limit.
	Limited bool
	// RetryAfter is the wait that Retry-After asks for (a date already
	// past reads as 0); HasRetryAfter reports a valid Retry-After.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Limit is the quota in units per window; Remaining the units left in
	// the current window. -1 when unknown.
	Limit, Remaining int64
	// Reset is the time until the quota refills; Window the quota's
	// window. 0 when unknown.
	Reset, Window time.Duration
	// Source is the header family that Limit, Remaining, Reset and Window
	// came from: one of the Source constants.
	Source string
}

// ParseFeedback reads a response's status and headers at time now. It
// never fails: a malformed value is ignored and its field stays unknown.
// Header names match case-insensitively.
//
// Quota fields come from one family, the first in the order of the Source
// constants that states a remaining quota or a reset, else the first that
// states a limit or a window: families are never mixed. Of several quotas
// in a family (RateLimit policies, requests and tokens), the most
// restrictive is reported: the least remaining, then the longest reset.
// RateLimit-Policy alone reports its lowest rate (q/w).
func ParseFeedback(status int, h http.Header, now time.Time) Feedback {
	h = canonicalHeader(h)
	f := Feedback{Limit: -1, Remaining: -1, Source: SourceNone}
	f.RetryAfter, f.HasRetryAfter = longest(h.Values("Retry-After"), now, parseRetryAfter)
	if f.HasRetryAfter {
		f.Source = SourceRetryAfter
	}
	limitOnly := false // a family stated only a limit or a window; a later one may state more
	for _, fam := range families {
		q, ok := fam.read(h, now)
		stated := q.Remaining >= 0 || q.Reset > 0
		if ok && (stated || !limitOnly && (q.Limit >= 0 || q.Window > 0)) {
			f.Limit, f.Remaining, f.Reset, f.Window, f.Source = q.Limit, q.Remaining, q.Reset, q.Window, fam.source
			if stated {
				break
			}
			limitOnly = true
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

// PauseFor returns how long the whole fleet should stop calling after this
// response: for a limited one, RetryAfter when above 0 (0 would retry in a
// hot loop), else Reset when Remaining is 0, else defaultBackoff; for any
// other, Reset when Remaining is 0 (the next call would be refused), else
// 0. The result is rounded up to a millisecond, and at most maxPause (at
// most MaxStatedDuration when maxPause <= 0).
func (f Feedback) PauseFor(defaultBackoff, maxPause time.Duration) time.Duration {
	if maxPause <= 0 || maxPause > MaxStatedDuration {
		maxPause = MaxStatedDuration
	}
	var d time.Duration
	switch {
	case f.Limited && f.HasRetryAfter && f.RetryAfter > 0:
		d = f.RetryAfter
	case f.Remaining == 0 && f.Reset > 0:
		d = f.Reset
	case f.Limited:
		d = defaultBackoff
	}
	return min(ceilDuration(d), maxPause)
}

// statedQuota is one quota as a downstream states it: Name is its policy's
// name in RateLimit or RateLimit-Policy; -1 and 0 mean unknown, as in
// Feedback.
type statedQuota struct {
	Name             string
	Limit, Remaining int64
	Reset, Window    time.Duration
}

// families, in order of precedence. Each reads its most restrictive quota,
// or false when the response has none of its fields in a readable form.
var families = []struct {
	source string
	read   func(h http.Header, now time.Time) (statedQuota, bool)
}{
	{SourceRateLimit, structuredQuota},
	{SourceRateLimitLegacy, fields(fieldSet{limit: "RateLimit-Limit", remaining: "RateLimit-Remaining",
		reset: []string{"RateLimit-Reset", "RateLimit-ResetTime"}, policyWindow: true})}, // ResetTime: GitLab's date
	{SourceOpenAI, fields(kind("X-RateLimit-%s-Requests"), kind("X-RateLimit-%s-Tokens"))},
	{SourceAnthropic, fields(kind("Anthropic-RateLimit-Requests-%s"), kind("Anthropic-RateLimit-Tokens-%s"),
		kind("Anthropic-RateLimit-Input-Tokens-%s"), kind("Anthropic-RateLimit-Output-Tokens-%s"))},
	// Reset-After (Discord) is a delta, immune to clock skew: before Reset.
	{SourceXRateLimit, fields(
		fieldSet{limit: "X-RateLimit-Limit", remaining: "X-RateLimit-Remaining", used: "X-RateLimit-Used",
			reset: []string{"X-RateLimit-Reset-After", "X-RateLimit-Reset"}},
		fieldSet{limit: "X-Rate-Limit-Limit", remaining: "X-Rate-Limit-Remaining", reset: []string{"X-Rate-Limit-Reset"}})},
	{SourceShopify, shopifyQuota},
}

// fieldSet names the fields of one quota. Of the reset fields, the first
// with a readable value counts.
type fieldSet struct {
	limit, remaining string
	used             string // units used, read when remaining is absent (GitHub)
	reset            []string
	policyWindow     bool // the window of the RateLimit-Policy with the same limit
}

// kind names the fields of one kind of units by a pattern with %s for
// Limit, Remaining and Reset.
func kind(pattern string) fieldSet {
	f := func(part string) string { return strings.Replace(pattern, "%s", part, 1) }
	return fieldSet{limit: f("Limit"), remaining: f("Remaining"), reset: []string{f("Reset")}}
}

// fields reads a family with a field per count or reset.
func fields(sets ...fieldSet) func(http.Header, time.Time) (statedQuota, bool) {
	return func(h http.Header, now time.Time) (statedQuota, bool) {
		var qs []statedQuota
		for _, fs := range sets {
			q := statedQuota{Remaining: minCount(h.Values(fs.remaining))}
			q.Limit, q.Window = limitField(h.Values(fs.limit))
			if used := minCount(h.Values(fs.used)); fs.used != "" && used >= 0 && q.Remaining < 0 && q.Limit >= 0 {
				q.Remaining = max(q.Limit-used, 0)
			}
			hasReset := false
			for _, r := range fs.reset {
				if q.Reset, hasReset = longest(h.Values(r), now, parseReset); hasReset {
					break
				}
			}
			if fs.policyWindow && q.Window == 0 && q.Limit >= 0 {
				q.Window = matchPolicy(statedQuota{Limit: q.Limit}, parseRateLimitPolicy(h.Values("RateLimit-Policy")...)).Window
			}
			if q.Limit >= 0 || q.Remaining >= 0 || hasReset {
				qs = append(qs, q)
			}
		}
		return pick(qs, tighter)
	}
}

// structuredQuota reads RateLimit, completed by the matching policy of
// RateLimit-Policy; without RateLimit, the policy of the lowest rate.
func structuredQuota(h http.Header, _ time.Time) (statedQuota, bool) {
	pol := parseRateLimitPolicy(h.Values("RateLimit-Policy")...)
	q, ok := pick(parseRateLimit(h.Values("RateLimit")...), tighter)
	if !ok {
		return pick(pol, slower)
	}
	if p := matchPolicy(q, pol); p.Limit >= 0 {
		q.Window = p.Window
		if q.Limit < 0 {
			q.Limit = p.Limit
		}
	}
	return q, true
}

// shopifyQuota reads the first valid X-Shopify-Shop-Api-Call-Limit:
// "32/40" is 32 calls used of a bucket of 40.
func shopifyQuota(h http.Header, _ time.Time) (statedQuota, bool) {
	for _, v := range h.Values("X-Shopify-Shop-Api-Call-Limit") {
		a, b, _ := strings.Cut(v, "/")
		used, uok := parseCount(a)
		limit, lok := parseCount(b)
		if uok && lok {
			return statedQuota{Limit: limit, Remaining: max(limit-used, 0)}, true
		}
	}
	return statedQuota{}, false
}

// pick returns the least quota of qs by order, the first on a tie; false
// for none.
func pick(qs []statedQuota, order func(a, b statedQuota) int) (statedQuota, bool) {
	if len(qs) == 0 {
		return statedQuota{}, false
	}
	return slices.MinFunc(qs, order), true
}

// tighter orders by less remaining (unknown, -1, counts as plenty), then
// a longer reset.
func tighter(a, b statedQuota) int {
	return cmp.Or(cmp.Compare(uint64(a.Remaining), uint64(b.Remaining)), cmp.Compare(b.Reset, a.Reset))
}

// slower orders by a lower rate; policies with a window before those
// without, which compare by limit.
func slower(a, b statedQuota) int {
	switch {
	case (a.Window > 0) != (b.Window > 0):
		return cmp.Compare(b.Window, a.Window)
	case a.Window == 0:
		return cmp.Compare(a.Limit, b.Limit)
	}
	return cmp.Compare(float64(a.Limit)*float64(b.Window), float64(b.Limit)*float64(a.Window))
}

// matchPolicy finds the policy that a RateLimit quota refers to: by name,
// or for an unnamed one (draft-07) by its limit among the policies with a
// window. Its Limit is -1 when none matches.
func matchPolicy(q statedQuota, pol []statedQuota) statedQuota {
	for _, p := range pol {
		if q.Name != "" && p.Name == q.Name || q.Name == "" && q.Limit >= 0 && p.Limit == q.Limit && p.Window > 0 {
			return p
		}
	}
	return statedQuota{Limit: -1}
}

// parseRateLimitPolicy reads RateLimit-Policy lines: "burst";q=100;w=60
// (draft-08; q= is required) or 100;w=60 (drafts 06 and 07).
func parseRateLimitPolicy(lines ...string) []statedQuota {
	var qs []statedQuota
	for _, m := range sfMembers(lines) {
		name, named := sfName(m.Value)
		limit, counted := sfCount(m.Value)
		if q, ok := sfCount(m.param("q")); ok && (named || counted) {
			limit, counted = q, true
		}
		if m.key == "" && counted {
			qs = append(qs, statedQuota{Name: name, Limit: limit, Remaining: -1, Window: m.window()})
		}
	}
	return qs
}

// parseRateLimit reads RateLimit lines: "default";r=50;t=30 (draft-08),
// a quota per item with r= or t=, or limit=100, remaining=50, reset=30
// (draft-07), one unnamed quota. Resets are delta-seconds.
func parseRateLimit(lines ...string) []statedQuota {
	var qs []statedQuota
	dict, inDict := statedQuota{Limit: -1, Remaining: -1}, false
	for _, m := range sfMembers(lines) {
		n, isNumber := sfCount(m.Value)
		switch {
		case m.key == "":
			name, ok := sfName(m.Value)
			r, hasR := sfCount(m.param("r"))
			t, hasT := sfSeconds(m.param("t"))
			if ok && (hasR || hasT) {
				qs = append(qs, statedQuota{Name: name, Limit: -1, Remaining: r, Reset: t})
			}
		case m.key == "limit" && isNumber:
			dict.Limit, inDict = n, true
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

// limitField reads a limit that may be followed by its policies, as in
// "100, 100;w=60, 1000;w=3600" (drafts 00 to 05; Whoop writes window=): the
// first count, and the window of the first member with that count. A
// value that is no RFC 9651 List (over 15 digits, say) is read by minCount.
func limitField(lines []string) (limit int64, window time.Duration) {
	limit = -1
	for _, m := range sfMembers(lines) {
		if n, ok := sfCount(m.Value); ok && m.key == "" && (limit < 0 || n == limit && window == 0) {
			limit, window = n, m.window()
		}
	}
	if limit < 0 {
		limit = minCount(lines)
	}
	return limit, window
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

// canonicalHeader returns a copy of h that merges the values of keys
// differing only in case, in key order.
func canonicalHeader(h http.Header) http.Header {
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

// window reads the member's w= (or window=) as seconds; 0 when absent.
func (m sfMember) window() time.Duration {
	w, ok := sfSeconds(m.param("w"))
	if !ok {
		w, _ = sfSeconds(m.param("window"))
	}
	return w
}

// sfName reads a String, or leniently a Token, as a policy's name.
func sfName(v any) (string, bool) {
	if t, ok := v.(httpsfv.Token); ok {
		return string(t), true
	}
	s, ok := v.(string)
	return s, ok
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

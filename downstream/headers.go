package downstream

// This file reads what a downstream API says about the caller's rate limit:
// the status code, Retry-After (RFC 9110, section 10.2.3), the IETF
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers, in all three
// shapes it has had) and the vendor families that predate them. Every parser
// here is total: a malformed value is ignored, never an error, because a
// downstream's bad header must not break a worker.

import (
	"math"
	"math/bits"
	"net/http"
	"sort"
	"strings"
	"time"
)

// MaxStatedDuration bounds every duration parsed from a header: a larger
// value (a Retry-After of a billion seconds, an epoch in the year 30000, a
// window that overflows int64) reads as MaxStatedDuration. 31 days keeps a
// daily, weekly or monthly quota's window and reset intact while leaving
// all arithmetic on the result far from overflow; pauses are capped much
// lower by PauseFor's maxPause.
const MaxStatedDuration = 31 * 24 * time.Hour

// durationResolution is the unit that durations are rounded up to when they
// come from fractional seconds, dates or duration strings: a pause is never
// shorter than the downstream asked for, and never carries noise below a
// millisecond.
const durationResolution = time.Millisecond

// Header families, as reported in Feedback.Source. The set is closed, so
// Source is safe as a metric label.
const (
	// SourceNone: the response said nothing about rate limits.
	SourceNone = "none"
	// SourceRetryAfter: only Retry-After spoke.
	SourceRetryAfter = "retry-after"
	// SourceRateLimit: the structured RateLimit and RateLimit-Policy
	// fields, in the list form of draft-08 and later
	// (RateLimit: "default";r=50;t=30) or the dictionary form of draft-07
	// (RateLimit: limit=100, remaining=50, reset=30).
	SourceRateLimit = "ratelimit"
	// SourceRateLimitLegacy: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, the separate fields of drafts 00 to 06 (GitLab,
	// Kong, Envoy, express-rate-limit and others).
	SourceRateLimitLegacy = "ratelimit-legacy"
	// SourceOpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}.
	SourceOpenAI = "openai"
	// SourceAnthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
	// output-tokens}-{limit,remaining,reset}.
	SourceAnthropic = "anthropic"
	// SourceXRateLimit: X-RateLimit-Limit, -Remaining, -Used, -Reset and
	// -Reset-After (GitHub, Discord, Twitter's X-Rate-Limit-* and many
	// more).
	SourceXRateLimit = "x-ratelimit"
	// SourceShopify: X-Shopify-Shop-Api-Call-Limit ("32/40").
	SourceShopify = "shopify"
)

// Feedback is what one HTTP response says about the caller's rate limit.
type Feedback struct {
	// Limited reports a response that refused the call for its rate:
	// status 429; 503 with Retry-After; or 403 with Retry-After or with a
	// remaining quota of 0, which is how GitHub answers an exhausted
	// primary or secondary rate limit.
	Limited bool
	// RetryAfter is the wait that Retry-After asks for: delta-seconds, or
	// an HTTP-date measured from now (a date already past reads as 0).
	// 0 when absent.
	RetryAfter time.Duration
	// HasRetryAfter reports a valid Retry-After, which may be 0.
	HasRetryAfter bool
	// Limit is the quota in units per window, when stated; -1 unknown.
	Limit int64
	// Remaining is the units left in the current window; -1 unknown.
	Remaining int64
	// Reset is the time until the quota resets or the remaining units
	// refill; 0 unknown (or already reset).
	Reset time.Duration
	// Window is the quota's window (RateLimit-Policy w=, or the w= of a
	// legacy RateLimit-Limit policy), when stated; 0 unknown.
	Window time.Duration
	// Source is the header family that Limit, Remaining, Reset and Window
	// came from: one of the Source constants.
	Source string
}

// StatedQuota is one quota as a downstream states it: a policy of the
// RateLimit-Policy field, a service limit of the RateLimit field, or one
// kind (requests, tokens) of an LLM provider's limits.
type StatedQuota struct {
	// Name is the policy's name (draft-08 and later) or the kind of
	// units; "" when the field names none.
	Name string
	// Limit is the quota (q=, limit=); -1 unknown.
	Limit int64
	// Remaining is the quota left (r=, remaining=); -1 unknown.
	Remaining int64
	// Reset is the time until the quota resets (t=, reset=); 0 unknown.
	Reset time.Duration
	// Window is the quota's window (w=); 0 unknown.
	Window time.Duration
}

// ParseFeedback reads a response's status and headers at time now. It
// never fails: a malformed value is ignored and its field stays unknown.
// Header names match case-insensitively, so h may be a raw map whose keys
// are not in canonical form.
//
// Retry-After is always read. Quota fields come from one family, the first
// of these that states a remaining quota or a reset: the structured
// RateLimit fields, the legacy RateLimit-* fields, OpenAI's, Anthropic's,
// X-RateLimit-* (or X-Rate-Limit-*), Shopify's call limit. When none states
// either, the first that states a limit or a window is used. Families are
// never mixed, so Limit, Remaining and Reset always describe one quota.
//
// When a family states several quotas (several RateLimit policies, or
// requests and tokens), the most restrictive is reported: the one with the
// least remaining, and among those the longest reset. So an exhausted
// quota always wins, and when several are exhausted the pause lasts until
// all have refilled. With RateLimit-Policy alone (no RateLimit field), the
// policy with the lowest rate (q/w) is reported, with Remaining unknown.
func ParseFeedback(status int, h http.Header, now time.Time) Feedback {
	h = canonicalHeader(h)
	f := Feedback{Limit: -1, Remaining: -1, Source: SourceNone}
	f.RetryAfter, f.HasRetryAfter = retryAfterField(h[fieldRetryAfter], now)
	if q, src, ok := quotaFromHeaders(h, now); ok {
		f.Limit, f.Remaining, f.Reset, f.Window = q.Limit, q.Remaining, q.Reset, q.Window
		f.Source = src
	} else if f.HasRetryAfter {
		f.Source = SourceRetryAfter
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
// response:
//
//   - a limited response: RetryAfter when it is above 0; else Reset when
//     Remaining is 0 and Reset is known; else defaultBackoff. A Retry-After
//     of 0 (or a date already past) on a refusal is treated as no answer,
//     so that the fleet does not retry in a hot loop;
//   - any other response: Reset when Remaining is 0 and Reset is known,
//     since the next call would be refused; else 0.
//
// The result is rounded up to a whole millisecond, never negative, and at
// most maxPause (at most MaxStatedDuration when maxPause <= 0).
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
	return min(ceilDuration(d, durationResolution), maxPause)
}

// ParseRetryAfter reads one Retry-After value at time now: delta-seconds,
// or an HTTP-date (IMF-fixdate, RFC 850 or asctime; RFC 3339 is accepted
// too). Delta-seconds may carry a fraction ("2.0", as Shopify sends), which
// is rounded up to a whole second; signs, exponents and trailing text are
// malformed. A date yields the time from now until it, rounded up to a
// millisecond, and 0 with ok=true when it is already past. Values beyond
// MaxStatedDuration read as MaxStatedDuration.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	if v == "" {
		return 0, false
	}
	if d, n, ok := scanDecimal(v); ok && n == len(v) {
		return ceilDuration(d.times(time.Second), time.Second), true
	}
	t, ok := parseHTTPDate(v)
	if !ok {
		return 0, false
	}
	return untilTime(t, now), true
}

// Thresholds of the epoch heuristic of ParseReset.
const (
	// epochSeconds is 2001-09-09 in Unix seconds. A delta of this many
	// seconds would be 31 years: no quota window is that long, so a bare
	// number this large is a Unix time.
	epochSeconds = 1e9
	// epochMillis is 2001-09-09 in Unix milliseconds; as seconds it would
	// be the year 33658.
	epochMillis = 1e12
	// epochMillisMax is the year 33658 in Unix milliseconds: beyond it a
	// value is absurd, and reads as MaxStatedDuration.
	epochMillisMax = 1e15
)

// ParseReset reads one reset value, as sent in X-RateLimit-Reset,
// X-RateLimit-Reset-After, RateLimit-Reset, OpenAI's x-ratelimit-reset-*
// or Anthropic's anthropic-ratelimit-*-reset, at time now, and returns the
// time until the reset. The forms:
//
//   - a bare number, which may have a fraction (Discord sends
//     "1470173023.123" and "64.57"). Below 1e9 it is delta-seconds; from
//     1e9 (2001-09-09 as Unix seconds; as a delta, 31 years) up to 1e12 it
//     is Unix time in seconds (GitHub, Discord, GitLab); from 1e12 (the
//     same instant in milliseconds) it is Unix time in milliseconds;
//   - a duration string such as "1s", "6m0s", "20ms" (OpenAI), see
//     ParseDuration;
//   - an HTTP-date or RFC 3339 time (Anthropic).
//
// A time already past reads as 0 with ok=true. The result is rounded up to
// a millisecond and at most MaxStatedDuration.
func ParseReset(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	if v == "" {
		return 0, false
	}
	if d, n, ok := scanDecimal(v); ok && n == len(v) {
		switch {
		case d.whole >= epochMillisMax:
			return MaxStatedDuration, true
		case d.whole >= epochMillis:
			t := time.UnixMilli(int64(d.whole))
			if d.nanos != 0 || d.finer {
				t = t.Add(time.Millisecond)
			}
			return untilTime(t, now), true
		case d.whole >= epochSeconds:
			t := time.Unix(int64(d.whole), int64(d.nanos))
			if d.finer {
				t = t.Add(time.Nanosecond)
			}
			return untilTime(t, now), true
		default:
			return ceilDuration(d.times(time.Second), durationResolution), true
		}
	}
	if d, ok := ParseDuration(v); ok {
		return d, true
	}
	if t, ok := parseHTTPDate(v); ok {
		return untilTime(t, now), true
	}
	return 0, false
}

// ParseDuration reads a duration string as OpenAI sends them: a sequence
// of decimal numbers, each with a unit ("1s", "6m0s", "20ms", "2m59.56s",
// "1h30m"). Units are ns, us (or µs), ms, s, m, h and d; a bare number is
// seconds. Unlike time.ParseDuration it rejects signs, accepts days, and
// does not fail on overflow: the result is rounded up to a millisecond and
// at most MaxStatedDuration.
func ParseDuration(v string) (time.Duration, bool) {
	s := trimOWS(v)
	if s == "" {
		return 0, false
	}
	var total time.Duration
	for first := true; s != ""; first = false {
		d, n, ok := scanDecimal(s)
		if !ok {
			return 0, false
		}
		s = s[n:]
		j := 0
		for j < len(s) && !isDigit(s[j]) && s[j] != '.' {
			j++
		}
		var unit time.Duration
		if j == 0 {
			if !first || s != "" {
				return 0, false
			}
			unit = time.Second
		} else if unit, ok = durationUnit(s[:j]); !ok {
			return 0, false
		}
		s = s[j:]
		total = min(total+d.times(unit), MaxStatedDuration)
	}
	return ceilDuration(total, durationResolution), true
}

func durationUnit(u string) (time.Duration, bool) {
	switch strings.ToLower(u) {
	case "ns":
		return time.Nanosecond, true
	case "us", "µs", "μs": // U+00B5 and U+03BC
		return time.Microsecond, true
	case "ms":
		return time.Millisecond, true
	case "s":
		return time.Second, true
	case "m":
		return time.Minute, true
	case "h":
		return time.Hour, true
	case "d":
		return 24 * time.Hour, true
	}
	return 0, false
}

// ParseCount reads a non-negative quota count: digits, optionally with a
// fraction, which is dropped (a count is never overstated). Values beyond
// math.MaxInt64 read as math.MaxInt64.
func ParseCount(v string) (int64, bool) {
	v = trimOWS(v)
	d, n, ok := scanDecimal(v)
	if !ok || n != len(v) {
		return 0, false
	}
	return d.count(), true
}

// ParseShopifyCallLimit reads X-Shopify-Shop-Api-Call-Limit: "32/40" is 32
// calls used of a bucket of 40.
func ParseShopifyCallLimit(v string) (used, limit int64, ok bool) {
	a, b, found := strings.Cut(v, "/")
	if !found {
		return 0, 0, false
	}
	if used, ok = ParseCount(a); !ok {
		return 0, 0, false
	}
	if limit, ok = ParseCount(b); !ok {
		return 0, 0, false
	}
	return used, limit, true
}

// ParseRateLimitPolicy reads the values of RateLimit-Policy fields (one per
// field line; a list may be split across lines). It accepts the draft-08
// form, "burst";q=100;w=60, "daily";q=1000;w=86400, whose q= is required,
// and the draft-06/07 form, 100;w=60, whose item is the quota. A window
// given as window= is read as w=. Malformed policies are skipped; at most
// 64 members of the list are read.
func ParseRateLimitPolicy(values ...string) []StatedQuota {
	var qs []StatedQuota
	for _, s := range sfSplit(values) {
		m, ok := parseSFMember(s)
		if !ok || m.key != "" {
			continue
		}
		q := StatedQuota{Limit: -1, Remaining: -1}
		switch m.item.kind {
		case sfString, sfToken:
			q.Name = m.item.str
		case sfNumber:
			if q.Limit, ok = m.item.count(); !ok {
				continue
			}
		default:
			continue
		}
		for _, p := range m.params {
			switch p.key {
			case "q":
				if n, ok := p.val.count(); ok {
					q.Limit = n
				}
			case "w", "window":
				if d, ok := p.val.seconds(); ok {
					q.Window = d
				}
			}
		}
		if q.Limit < 0 {
			continue
		}
		qs = append(qs, q)
	}
	return qs
}

// ParseRateLimit reads the values of RateLimit fields (one per field line).
// It accepts the draft-08 list form, "default";r=50;t=30, one StatedQuota
// per item that has r= or t=, and the draft-07 dictionary form,
// limit=100, remaining=50, reset=30, one unnamed StatedQuota. t= and reset=
// are delta-seconds (no epoch heuristic: the drafts allow none). Malformed
// members are skipped; at most 64 are read.
func ParseRateLimit(values ...string) []StatedQuota {
	var qs []StatedQuota
	dict := StatedQuota{Limit: -1, Remaining: -1}
	inDict := false
	for _, s := range sfSplit(values) {
		m, ok := parseSFMember(s)
		if !ok {
			continue
		}
		if m.key != "" {
			switch m.key {
			case "limit":
				if n, ok := m.item.count(); ok {
					dict.Limit, inDict = n, true
				}
			case "remaining":
				if n, ok := m.item.count(); ok {
					dict.Remaining, inDict = n, true
				}
			case "reset":
				if d, ok := m.item.seconds(); ok {
					dict.Reset, inDict = d, true
				}
			}
			continue
		}
		if m.item.kind != sfString && m.item.kind != sfToken {
			continue
		}
		q := StatedQuota{Name: m.item.str, Limit: -1, Remaining: -1}
		stated := false
		for _, p := range m.params {
			switch p.key {
			case "r":
				if n, ok := p.val.count(); ok {
					q.Remaining, stated = n, true
				}
			case "t":
				if d, ok := p.val.seconds(); ok {
					q.Reset, stated = d, true
				}
			}
		}
		if stated {
			qs = append(qs, q)
		}
	}
	if inDict {
		qs = append(qs, dict)
	}
	return qs
}

// tighter reports whether a is more restrictive than b: less remaining
// (unknown counts as plenty), then a longer reset.
func tighter(a, b StatedQuota) bool {
	ar, br := a.Remaining, b.Remaining
	if ar < 0 {
		ar = math.MaxInt64
	}
	if br < 0 {
		br = math.MaxInt64
	}
	if ar != br {
		return ar < br
	}
	return a.Reset > b.Reset
}

func mostRestrictive(qs []StatedQuota) (StatedQuota, bool) {
	if len(qs) == 0 {
		return StatedQuota{}, false
	}
	best := qs[0]
	for _, q := range qs[1:] {
		if tighter(q, best) {
			best = q
		}
	}
	return best, true
}

// slower reports whether policy a allows a lower rate than b. Policies
// with a window sort before those without, which compare by limit.
func slower(a, b StatedQuota) bool {
	if (a.Window > 0) != (b.Window > 0) {
		return a.Window > 0
	}
	if a.Window == 0 {
		return a.Limit < b.Limit
	}
	return float64(a.Limit)*float64(b.Window) < float64(b.Limit)*float64(a.Window)
}

// matchPolicy finds the RateLimit-Policy entry that a RateLimit quota
// refers to: by name; for an unnamed quota with a limit (draft-07), by
// limit; for an unnamed quota without one, the only policy.
func matchPolicy(q StatedQuota, pol []StatedQuota) (StatedQuota, bool) {
	switch {
	case q.Name != "":
		for _, p := range pol {
			if p.Name == q.Name {
				return p, true
			}
		}
	case q.Limit >= 0:
		for _, p := range pol {
			if p.Limit == q.Limit && p.Window > 0 {
				return p, true
			}
		}
	case len(pol) == 1:
		return pol[0], true
	}
	return StatedQuota{}, false
}

// The fields read, in canonical form, so that a canonical header can be
// indexed directly.
var (
	fieldRetryAfter      = http.CanonicalHeaderKey("Retry-After")
	fieldRateLimit       = http.CanonicalHeaderKey("RateLimit")
	fieldRateLimitPolicy = http.CanonicalHeaderKey("RateLimit-Policy")
	fieldShopify         = http.CanonicalHeaderKey("X-Shopify-Shop-Api-Call-Limit")
	legacyFields         = newQuotaFields("", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
	// GitLab's HTTP-date twin of RateLimit-Reset.
	fieldLegacyResetTime = http.CanonicalHeaderKey("RateLimit-ResetTime")
	openAIFields         = []quotaFields{
		newQuotaFields("requests", "X-RateLimit-Limit-Requests", "X-RateLimit-Remaining-Requests", "X-RateLimit-Reset-Requests"),
		newQuotaFields("tokens", "X-RateLimit-Limit-Tokens", "X-RateLimit-Remaining-Tokens", "X-RateLimit-Reset-Tokens"),
	}
	anthropicFields = func() []quotaFields {
		var fs []quotaFields
		for _, kind := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
			p := "Anthropic-RateLimit-" + kind
			fs = append(fs, newQuotaFields(kind, p+"-Limit", p+"-Remaining", p+"-Reset"))
		}
		return fs
	}()
	// X-RateLimit-* and, failing that, X-Rate-Limit-* (Twitter).
	xRateLimitFields = []xFields{newXFields("X-RateLimit-"), newXFields("X-Rate-Limit-")}
)

// quotaFields names the fields of one quota.
type quotaFields struct{ kind, limit, remaining, reset string }

func newQuotaFields(kind, limit, remaining, reset string) quotaFields {
	c := http.CanonicalHeaderKey
	return quotaFields{kind: kind, limit: c(limit), remaining: c(remaining), reset: c(reset)}
}

// xFields names the fields of the X-RateLimit-* family.
type xFields struct {
	quotaFields
	used, resetAfter string
}

func newXFields(prefix string) xFields {
	return xFields{
		quotaFields: newQuotaFields("", prefix+"Limit", prefix+"Remaining", prefix+"Reset"),
		used:        http.CanonicalHeaderKey(prefix + "Used"),
		resetAfter:  http.CanonicalHeaderKey(prefix + "Reset-After"),
	}
}

// headerFamily is one family of rate-limit fields; parse reports whether
// the response carried any of its fields in a readable form.
type headerFamily struct {
	source string
	parse  func(h http.Header, now time.Time) (StatedQuota, bool)
}

// headerFamilies, in order of precedence: the standard first, then its
// drafts, then vendors whose field names are unambiguous, then the generic
// X-RateLimit-* family.
var headerFamilies = []headerFamily{
	{SourceRateLimit, structuredQuota},
	{SourceRateLimitLegacy, legacyQuota},
	{SourceOpenAI, openAIQuota},
	{SourceAnthropic, anthropicQuota},
	{SourceXRateLimit, xRateLimitQuota},
	{SourceShopify, shopifyQuota},
}

func quotaFromHeaders(h http.Header, now time.Time) (StatedQuota, string, bool) {
	var fallback StatedQuota
	fallbackSource := ""
	for _, fam := range headerFamilies {
		q, ok := fam.parse(h, now)
		if !ok {
			continue
		}
		if q.Remaining >= 0 || q.Reset > 0 {
			return q, fam.source, true
		}
		if fallbackSource == "" && (q.Limit >= 0 || q.Window > 0) {
			fallback, fallbackSource = q, fam.source
		}
	}
	return fallback, fallbackSource, fallbackSource != ""
}

func structuredQuota(h http.Header, _ time.Time) (StatedQuota, bool) {
	pol := ParseRateLimitPolicy(h[fieldRateLimitPolicy]...)
	if q, ok := mostRestrictive(ParseRateLimit(h[fieldRateLimit]...)); ok {
		if p, ok := matchPolicy(q, pol); ok {
			if q.Limit < 0 {
				q.Limit = p.Limit
			}
			q.Window = p.Window
		}
		return q, true
	}
	if len(pol) == 0 {
		return StatedQuota{}, false
	}
	best := pol[0]
	for _, p := range pol[1:] {
		if slower(p, best) {
			best = p
		}
	}
	return best, true
}

func legacyQuota(h http.Header, now time.Time) (StatedQuota, bool) {
	q := StatedQuota{Remaining: minCount(h[legacyFields.remaining])}
	q.Limit, q.Window = limitField(h[legacyFields.limit])
	reset, hasReset := maxReset(h[legacyFields.reset], now)
	if !hasReset {
		reset, hasReset = maxReset(h[fieldLegacyResetTime], now)
	}
	q.Reset = reset
	if q.Limit < 0 && q.Remaining < 0 && !hasReset {
		return StatedQuota{}, false
	}
	if q.Window == 0 && q.Limit >= 0 {
		if p, ok := matchPolicy(StatedQuota{Limit: q.Limit}, ParseRateLimitPolicy(h[fieldRateLimitPolicy]...)); ok {
			q.Window = p.Window
		}
	}
	return q, true
}

func openAIQuota(h http.Header, now time.Time) (StatedQuota, bool) {
	return kindsQuota(h, now, openAIFields)
}

func anthropicQuota(h http.Header, now time.Time) (StatedQuota, bool) {
	return kindsQuota(h, now, anthropicFields)
}

// kindsQuota reads a family that states one quota per kind of unit and
// reports the most restrictive.
func kindsQuota(h http.Header, now time.Time, fields []quotaFields) (StatedQuota, bool) {
	var best StatedQuota
	found := false
	for _, f := range fields {
		q := StatedQuota{Name: f.kind, Remaining: minCount(h[f.remaining])}
		q.Limit, q.Window = limitField(h[f.limit])
		reset, hasReset := maxReset(h[f.reset], now)
		q.Reset = reset
		if q.Limit >= 0 || q.Remaining >= 0 || hasReset {
			if !found || tighter(q, best) {
				best, found = q, true
			}
		}
	}
	return best, found
}

func xRateLimitQuota(h http.Header, now time.Time) (StatedQuota, bool) {
	for _, f := range xRateLimitFields {
		q := StatedQuota{Remaining: minCount(h[f.remaining])}
		q.Limit, q.Window = limitField(h[f.limit])
		if q.Remaining < 0 && q.Limit >= 0 { // GitHub also states what was used
			if used := minCount(h[f.used]); used >= 0 {
				q.Remaining = max(q.Limit-used, 0)
			}
		}
		// Reset-After (Discord) is a delta, immune to clock skew: prefer it.
		reset, hasReset := maxReset(h[f.resetAfter], now)
		if !hasReset {
			reset, hasReset = maxReset(h[f.reset], now)
		}
		q.Reset = reset
		if q.Limit >= 0 || q.Remaining >= 0 || hasReset {
			return q, true
		}
	}
	return StatedQuota{}, false
}

func shopifyQuota(h http.Header, _ time.Time) (StatedQuota, bool) {
	for _, v := range h[fieldShopify] {
		if used, limit, ok := ParseShopifyCallLimit(v); ok {
			return StatedQuota{Limit: limit, Remaining: max(limit-used, 0)}, true
		}
	}
	return StatedQuota{}, false
}

// limitField reads a RateLimit-Limit or X-RateLimit-Limit value: the
// expiring limit, optionally followed by quota policies as in
// "100, 100;w=60, 1000;w=3600" (drafts 00 to 05; Whoop spells w= as
// window=). It returns the expiring limit (-1 if none) and its window: the
// w= of the first member, else of a later policy with the same limit.
func limitField(lines []string) (limit int64, window time.Duration) {
	limit = -1
	for _, s := range sfSplit(lines) {
		m, ok := parseSFMember(s)
		if !ok || m.key != "" {
			continue
		}
		n, ok := m.item.count()
		if !ok {
			continue
		}
		var w time.Duration
		for _, p := range m.params {
			if p.key == "w" || p.key == "window" {
				if d, ok := p.val.seconds(); ok {
					w = d
				}
			}
		}
		if limit < 0 {
			limit, window = n, w
		} else if window == 0 && n == limit {
			window = w
		}
	}
	return limit, window
}

// minCount reads a count field: the least count among its lines and
// comma-separated members (parameters after ';' are ignored); -1 if none.
func minCount(lines []string) int64 {
	least := int64(-1)
	for _, s := range sfSplit(lines) {
		s, _, _ = strings.Cut(s, ";")
		if n, ok := ParseCount(s); ok && (least < 0 || n < least) {
			least = n
		}
	}
	return least
}

// maxReset reads a reset field with ParseReset: the longest reset among its
// lines, each read whole first (an HTTP-date has a comma) and else member
// by member.
func maxReset(lines []string, now time.Time) (time.Duration, bool) {
	return longestOf(lines, func(v string) (time.Duration, bool) { return ParseReset(v, now) })
}

// retryAfterField reads the Retry-After lines like maxReset.
func retryAfterField(lines []string, now time.Time) (time.Duration, bool) {
	return longestOf(lines, func(v string) (time.Duration, bool) { return ParseRetryAfter(v, now) })
}

func longestOf(lines []string, parse func(string) (time.Duration, bool)) (time.Duration, bool) {
	var longest time.Duration
	found := false
	take := func(v string) bool {
		d, ok := parse(v)
		if ok {
			longest, found = max(longest, d), true
		}
		return ok
	}
	for _, line := range lines {
		if take(line) {
			continue
		}
		for _, s := range sfSplit([]string{line}) {
			s, _, _ = strings.Cut(s, ";")
			take(s)
		}
	}
	return longest, found
}

// canonicalHeader returns h with every key in canonical form, merging the
// values of keys that differ only in case: the canonical key's values
// first, then the others' in the order of their keys. It returns h itself
// when it is canonical already.
func canonicalHeader(h http.Header) http.Header {
	var odd []string
	for k := range h {
		if http.CanonicalHeaderKey(k) != k {
			odd = append(odd, k)
		}
	}
	if len(odd) == 0 {
		return h
	}
	sort.Strings(odd)
	c := make(http.Header, len(h))
	for k, v := range h {
		if http.CanonicalHeaderKey(k) == k {
			c[k] = append([]string(nil), v...)
		}
	}
	for _, k := range odd {
		ck := http.CanonicalHeaderKey(k)
		c[ck] = append(c[ck], h[k]...)
	}
	return c
}

// parseHTTPDate reads an HTTP-date in any of its three forms, or an RFC
// 3339 time.
func parseHTTPDate(v string) (time.Time, bool) {
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// untilTime returns the time from now until t, rounded up to the
// resolution, 0 when t is past, at most MaxStatedDuration. time.Time.Sub
// saturates instead of overflowing.
func untilTime(t, now time.Time) time.Duration {
	return ceilDuration(t.Sub(now), durationResolution)
}

// ceilDuration rounds d up to a multiple of g, within [0,
// MaxStatedDuration] (a multiple of every g used here).
func ceilDuration(d, g time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d >= MaxStatedDuration {
		return MaxStatedDuration
	}
	if r := d % g; r != 0 {
		d += g - r
	}
	return min(d, MaxStatedDuration)
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// decimal is a non-negative decimal number read without floating point,
// so that no value can overflow or lose its rounding direction.
type decimal struct {
	whole uint64 // integer part, saturating at math.MaxUint64
	nanos uint64 // the first nine fractional digits, in units of 1e-9
	finer bool   // a nonzero fractional digit after the ninth
}

// scanDecimal reads DIGIT+ ["." DIGIT+] at the start of s and returns it
// with the number of bytes read; ok is false when s does not start so.
func scanDecimal(s string) (d decimal, n int, ok bool) {
	for n < len(s) && isDigit(s[n]) {
		c := uint64(s[n] - '0')
		if d.whole > (math.MaxUint64-c)/10 {
			d.whole = math.MaxUint64
		} else {
			d.whole = d.whole*10 + c
		}
		n++
	}
	if n == 0 {
		return decimal{}, 0, false
	}
	if n < len(s) && s[n] == '.' {
		m, scale := n+1, uint64(1e8)
		for m < len(s) && isDigit(s[m]) {
			c := uint64(s[m] - '0')
			if scale > 0 {
				d.nanos += c * scale
				scale /= 10
			} else if c != 0 {
				d.finer = true
			}
			m++
		}
		if m == n+1 {
			return decimal{}, 0, false
		}
		n = m
	}
	return d, n, true
}

func (d decimal) isZero() bool { return d.whole == 0 && d.nanos == 0 && !d.finer }

// count is d without its fraction, at most math.MaxInt64.
func (d decimal) count() int64 {
	if d.whole > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(d.whole)
}

// times returns d units, rounded up to a nanosecond, at most
// MaxStatedDuration. unit must be at most a day, so that the fraction's
// product stays within bits.Div64's domain.
func (d decimal) times(unit time.Duration) time.Duration {
	u := uint64(unit)
	if d.whole > uint64(MaxStatedDuration)/u {
		return MaxStatedDuration
	}
	v := d.whole * u
	hi, lo := bits.Mul64(d.nanos, u) // nanos < 1e9 and u <= 8.64e13: hi < 1e9
	q, r := bits.Div64(hi, lo, 1e9)
	if r != 0 || d.finer {
		q++
	}
	return time.Duration(min(v+q, uint64(MaxStatedDuration)))
}

// A minimal, lenient reader of Structured Field Values (RFC 9651), enough
// for the RateLimit fields: it also reads optional whitespace around ';'
// and '=', upper-case keys, and non-ASCII bytes in strings, which servers
// send; it does not decode byte sequences or display strings.

// The most members and parameters read from one field and one member.
const (
	sfMaxMembers = 64
	sfMaxParams  = 32
)

type sfKind uint8

const (
	sfNumber sfKind = iota + 1 // Integer, Decimal or Date
	sfString                   // String or Display String (not decoded)
	sfToken
	sfBytes // Byte Sequence (not decoded)
	sfBool
	sfInnerList
)

type sfItem struct {
	kind sfKind
	neg  bool
	num  decimal
	str  string
}

// count reads a non-negative number item as a count.
func (it sfItem) count() (int64, bool) {
	if it.kind != sfNumber || it.neg && !it.num.isZero() {
		return 0, false
	}
	return it.num.count(), true
}

// seconds reads a non-negative number item as delta-seconds, rounded up
// to the resolution.
func (it sfItem) seconds() (time.Duration, bool) {
	if it.kind != sfNumber || it.neg && !it.num.isZero() {
		return 0, false
	}
	return ceilDuration(it.num.times(time.Second), durationResolution), true
}

type sfParam struct {
	key string
	val sfItem
}

// sfMember is a member of a List (key "") or of a Dictionary.
type sfMember struct {
	key    string
	item   sfItem
	params []sfParam
}

// sfSplit splits field lines into the members of a List or Dictionary:
// commas inside strings and inner lists do not split; empty members are
// dropped; at most sfMaxMembers are returned.
func sfSplit(lines []string) []string {
	var out []string
	add := func(m string) bool {
		if m = trimOWS(m); m != "" {
			out = append(out, m)
		}
		return len(out) < sfMaxMembers
	}
	for _, line := range lines {
		start, depth, inString := 0, 0, false
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case inString:
				if c == '\\' {
					i++
				} else if c == '"' {
					inString = false
				}
			case c == '"':
				inString = true
			case c == '(':
				depth++
			case c == ')':
				if depth > 0 {
					depth--
				}
			case c == ',' && depth == 0:
				if !add(line[start:i]) {
					return out
				}
				start = i + 1
			}
		}
		if !add(line[start:]) {
			return out
		}
	}
	return out
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// parseSFMember reads one member (as split by sfSplit): a list item with
// its parameters, or a dictionary member key=item with its parameters. A
// bare dictionary key (a true boolean) reads as a token item.
func parseSFMember(s string) (sfMember, bool) {
	p := &sfParser{s: s}
	var m sfMember
	p.ows()
	start := p.i
	if k, ok := p.key(); ok {
		p.ows()
		if p.peek() == '=' {
			p.i++
			p.ows()
			m.key = k
		} else {
			p.i = start
		}
	}
	var ok bool
	if p.peek() == '(' {
		m.item, ok = p.innerList()
	} else {
		m.item, ok = p.bareItem()
	}
	if !ok {
		return sfMember{}, false
	}
	if m.params, ok = p.params(); !ok {
		return sfMember{}, false
	}
	p.ows()
	return m, p.i == len(p.s)
}

// key reads a key, lower-cased: [A-Za-z*][A-Za-z0-9_.*-]*.
func (p *sfParser) key() (string, bool) {
	c := p.peek()
	if !isAlpha(c) && c != '*' {
		return "", false
	}
	j := p.i + 1
	for j < len(p.s) {
		c := p.s[j]
		if !isAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		j++
	}
	k := strings.ToLower(p.s[p.i:j])
	p.i = j
	return k, true
}

func (p *sfParser) params() ([]sfParam, bool) {
	var ps []sfParam
	for {
		save := p.i
		p.ows()
		if p.peek() != ';' {
			p.i = save
			return ps, true
		}
		p.i++
		p.ows()
		k, ok := p.key()
		if !ok || len(ps) == sfMaxParams {
			return nil, false
		}
		val := sfItem{kind: sfBool, num: decimal{whole: 1}}
		save = p.i
		p.ows()
		if p.peek() == '=' {
			p.i++
			p.ows()
			if val, ok = p.bareItem(); !ok {
				return nil, false
			}
		} else {
			p.i = save
		}
		ps = append(ps, sfParam{key: k, val: val})
	}
}

func (p *sfParser) innerList() (sfItem, bool) {
	p.i++ // '('
	for {
		p.ows()
		switch p.peek() {
		case ')':
			p.i++
			return sfItem{kind: sfInnerList}, true
		case 0:
			if p.i >= len(p.s) {
				return sfItem{}, false
			}
		}
		if _, ok := p.bareItem(); !ok {
			return sfItem{}, false
		}
		if _, ok := p.params(); !ok {
			return sfItem{}, false
		}
		if c := p.peek(); c != ' ' && c != '\t' && c != ')' {
			return sfItem{}, false
		}
	}
}

// bareItem reads one bare item; on success it has consumed at least one
// byte.
func (p *sfParser) bareItem() (sfItem, bool) {
	c := p.peek()
	switch {
	case c == '-' || isDigit(c):
		it := sfItem{kind: sfNumber}
		if c == '-' {
			it.neg = true
			p.i++
		}
		d, n, ok := scanDecimal(p.s[p.i:])
		if !ok {
			return sfItem{}, false
		}
		it.num = d
		p.i += n
		return it, true
	case c == '@': // Date: an Integer of Unix seconds
		p.i++
		if c := p.peek(); c != '-' && !isDigit(c) {
			return sfItem{}, false
		}
		return p.bareItem()
	case c == '"':
		return p.str()
	case c == '%': // Display String: read as a String, not decoded
		p.i++
		if p.peek() != '"' {
			return sfItem{}, false
		}
		return p.str()
	case c == ':':
		j := strings.IndexByte(p.s[p.i+1:], ':')
		if j < 0 {
			return sfItem{}, false
		}
		for _, b := range []byte(p.s[p.i+1 : p.i+1+j]) {
			if !isAlpha(b) && !isDigit(b) && b != '+' && b != '/' && b != '=' {
				return sfItem{}, false
			}
		}
		p.i += j + 2
		return sfItem{kind: sfBytes}, true
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			it := sfItem{kind: sfBool, num: decimal{whole: uint64(p.s[p.i+1] - '0')}}
			p.i += 2
			return it, true
		}
		return sfItem{}, false
	case isAlpha(c) || c == '*':
		j := p.i + 1
		for j < len(p.s) && isTokenChar(p.s[j]) {
			j++
		}
		it := sfItem{kind: sfToken, str: p.s[p.i:j]}
		p.i = j
		return it, true
	}
	return sfItem{}, false
}

// str reads a String starting at its opening quote: printable bytes, with
// \" and \\ as the only escapes.
func (p *sfParser) str() (sfItem, bool) {
	p.i++ // '"'
	start := p.i
	var b strings.Builder
	escaped := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' && p.s[p.i+1] != '\\' {
				return sfItem{}, false
			}
			if !escaped {
				b.WriteString(p.s[start:p.i])
				escaped = true
			}
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		case c == '"':
			s := p.s[start:p.i]
			if escaped {
				s = b.String()
			}
			p.i++
			return sfItem{kind: sfString, str: s}, true
		case c < 0x20 || c == 0x7f:
			return sfItem{}, false
		default:
			if escaped {
				b.WriteByte(c)
			}
			p.i++
		}
	}
	return sfItem{}, false
}

// isTokenChar reports the bytes of a Token after its first: tchar, ':'
// and '/'.
func isTokenChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

package downstream

// This file reads what a downstream API says about the caller's rate limit:
// the status code, Retry-After (RFC 9110, section 10.2.3), the IETF
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers, in all three
// shapes it has had) and the vendor families that predate them. Every parser
// here is total: a malformed value is ignored, never an error, because a
// downstream's bad header must not break a worker.
//
// Structured fields are read by github.com/dunglas/httpsfv, a maintained
// and complete RFC 9651 parser, and durations by time.ParseDuration; the
// code here only maps what they read onto quotas.

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
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

// statedQuota is one quota as a downstream states it: a policy of the
// RateLimit-Policy field, a service limit of the RateLimit field, or one
// kind (requests, tokens) of an LLM provider's limits.
type statedQuota struct {
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

// Thresholds of the epoch heuristic of parseReset.
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

// parseRetryAfter reads one Retry-After value at time now: delta-seconds,
// or an HTTP-date (IMF-fixdate, RFC 850 or asctime; RFC 3339 is accepted
// too). Delta-seconds may carry a fraction ("2.0", as Shopify sends), which
// is rounded up to a whole second; signs, exponents and trailing text are
// malformed. A date yields the time from now until it, rounded up to a
// millisecond, and 0 with ok=true when it is already past. Values beyond
// MaxStatedDuration read as MaxStatedDuration.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	if whole, frac, ok := number(v); ok {
		if whole >= uint64(MaxStatedDuration/time.Second) {
			return MaxStatedDuration, true
		}
		d := time.Duration(whole) * time.Second
		if strings.Trim(frac, "0") != "" {
			d += time.Second
		}
		return d, true
	}
	if t, ok := parseHTTPDate(v); ok {
		return untilTime(t, now), true
	}
	return 0, false
}

// parseReset reads one reset value, as sent in X-RateLimit-Reset,
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
//     parseDuration;
//   - an HTTP-date or RFC 3339 time (Anthropic).
//
// A time already past reads as 0 with ok=true. The result is rounded up to
// a millisecond and at most MaxStatedDuration.
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	whole, _, ok := number(v)
	switch {
	case !ok:
		if d, ok := parseDuration(v); ok {
			return d, true
		}
		if t, ok := parseHTTPDate(v); ok {
			return untilTime(t, now), true
		}
		return 0, false
	case whole >= epochMillisMax:
		return MaxStatedDuration, true
	case whole >= epochMillis:
		return untilEpoch(v+"ms", now), true
	case whole >= epochSeconds:
		return untilEpoch(v+"s", now), true
	}
	return parseDuration(v) // delta-seconds below 1e9 always fit
}

// untilEpoch returns the time from now until a Unix time written as a
// duration since the epoch ("1748779260.5s", "1748779260500ms"). A time
// beyond the year 2262, which time.Duration cannot hold, reads as
// MaxStatedDuration.
func untilEpoch(since string, now time.Time) time.Duration {
	d, err := time.ParseDuration(since)
	if err != nil {
		return MaxStatedDuration
	}
	return untilTime(time.Unix(0, 0).Add(d), now)
}

// parseDuration reads a duration as OpenAI and Groq send them ("1s",
// "6m0s", "20ms", "2m59.56s") with time.ParseDuration. Around it, it reads
// a bare number as seconds ("1.5"), a leading count of days ("1d", "1d2h")
// and upper-case units, and refuses signs. The result is rounded up to a
// millisecond and at most MaxStatedDuration; a value that time.Duration
// cannot hold (over 292 years) is malformed.
func parseDuration(v string) (time.Duration, bool) {
	s := strings.ToLower(trimOWS(v))
	if s == "" || strings.ContainsAny(s, "+-") {
		return 0, false
	}
	if _, _, ok := number(s); ok {
		s += "s"
	}
	var days time.Duration
	if n, rest, ok := strings.Cut(s, "d"); ok {
		if _, _, ok := number(n); !ok {
			return 0, false
		}
		d, err := time.ParseDuration(n + "h")
		if err != nil {
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
	return ceilDuration(days+min(d, MaxStatedDuration), durationResolution), true
}

// parseCount reads a non-negative quota count: digits, optionally with a
// fraction, which is dropped (a count is never overstated). Values beyond
// math.MaxInt64 read as math.MaxInt64.
func parseCount(v string) (int64, bool) {
	whole, _, ok := number(trimOWS(v))
	if !ok {
		return 0, false
	}
	return int64(min(whole, math.MaxInt64)), true
}

// number splits a decimal number, DIGIT+ ["." DIGIT+], into its integer
// part (at most math.MaxUint64) and its fraction's digits; ok is false for
// anything else: signs, exponents, spaces, a dot without digits on both
// sides.
func number(s string) (whole uint64, frac string, ok bool) {
	w, frac, hasDot := strings.Cut(s, ".")
	if !allDigits(w) || hasDot && !allDigits(frac) {
		return 0, "", false
	}
	whole, _ = strconv.ParseUint(w, 10, 64) // out of range: math.MaxUint64
	return whole, frac, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseShopifyCallLimit reads X-Shopify-Shop-Api-Call-Limit: "32/40" is 32
// calls used of a bucket of 40.
func parseShopifyCallLimit(v string) (used, limit int64, ok bool) {
	a, b, found := strings.Cut(v, "/")
	if !found {
		return 0, 0, false
	}
	if used, ok = parseCount(a); !ok {
		return 0, 0, false
	}
	if limit, ok = parseCount(b); !ok {
		return 0, 0, false
	}
	return used, limit, true
}

// parseRateLimitPolicy reads the values of RateLimit-Policy fields (one per
// field line; a list may be split across lines). It accepts the draft-08
// form, "burst";q=100;w=60, "daily";q=1000;w=86400, whose q= is required,
// and the draft-06/07 form, 100;w=60, whose item is the quota. A window
// given as window= is read as w=. Policies without a valid quota are
// skipped, and so are lines that are not RFC 9651 Lists (see sfMembers).
func parseRateLimitPolicy(lines ...string) []statedQuota {
	var qs []statedQuota
	for _, m := range sfMembers(lines) {
		if m.key != "" {
			continue
		}
		q := statedQuota{Limit: -1, Remaining: -1}
		if name, ok := sfName(m.Value); ok {
			q.Name = name
		} else if q.Limit, ok = sfCount(m.Value); !ok {
			continue
		}
		if n, ok := sfCount(m.param("q")); ok {
			q.Limit = n
		}
		q.Window = m.window()
		if q.Limit >= 0 {
			qs = append(qs, q)
		}
	}
	return qs
}

// parseRateLimit reads the values of RateLimit fields (one per field line).
// It accepts the draft-08 list form, "default";r=50;t=30, one statedQuota
// per item that has r= or t=, and the draft-07 dictionary form,
// limit=100, remaining=50, reset=30, one unnamed statedQuota. t= and reset=
// are delta-seconds (no epoch heuristic: the drafts allow none). Lines
// that are neither an RFC 9651 List nor a Dictionary are skipped.
func parseRateLimit(lines ...string) []statedQuota {
	var qs []statedQuota
	dict := statedQuota{Limit: -1, Remaining: -1}
	inDict := false
	for _, m := range sfMembers(lines) {
		switch m.key {
		case "":
			name, ok := sfName(m.Value)
			if !ok {
				continue
			}
			q := statedQuota{Name: name, Limit: -1, Remaining: -1}
			r, hasR := sfCount(m.param("r"))
			t, hasT := sfSeconds(m.param("t"))
			if hasR {
				q.Remaining = r
			}
			if hasT {
				q.Reset = t
			}
			if hasR || hasT {
				qs = append(qs, q)
			}
		case "limit":
			if n, ok := sfCount(m.Value); ok {
				dict.Limit, inDict = n, true
			}
		case "remaining":
			if n, ok := sfCount(m.Value); ok {
				dict.Remaining, inDict = n, true
			}
		case "reset":
			if d, ok := sfSeconds(m.Value); ok {
				dict.Reset, inDict = d, true
			}
		}
	}
	if inDict {
		qs = append(qs, dict)
	}
	return qs
}

// tighter reports whether a is more restrictive than b: less remaining
// (unknown counts as plenty), then a longer reset.
func tighter(a, b statedQuota) bool {
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

func mostRestrictive(qs []statedQuota) (statedQuota, bool) {
	if len(qs) == 0 {
		return statedQuota{}, false
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
func slower(a, b statedQuota) bool {
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
func matchPolicy(q statedQuota, pol []statedQuota) (statedQuota, bool) {
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
	return statedQuota{}, false
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
	parse  func(h http.Header, now time.Time) (statedQuota, bool)
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

func quotaFromHeaders(h http.Header, now time.Time) (statedQuota, string, bool) {
	var fallback statedQuota
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

func structuredQuota(h http.Header, _ time.Time) (statedQuota, bool) {
	pol := parseRateLimitPolicy(h[fieldRateLimitPolicy]...)
	if q, ok := mostRestrictive(parseRateLimit(h[fieldRateLimit]...)); ok {
		if p, ok := matchPolicy(q, pol); ok {
			if q.Limit < 0 {
				q.Limit = p.Limit
			}
			q.Window = p.Window
		}
		return q, true
	}
	if len(pol) == 0 {
		return statedQuota{}, false
	}
	best := pol[0]
	for _, p := range pol[1:] {
		if slower(p, best) {
			best = p
		}
	}
	return best, true
}

func legacyQuota(h http.Header, now time.Time) (statedQuota, bool) {
	q := statedQuota{Remaining: minCount(h[legacyFields.remaining])}
	q.Limit, q.Window = limitField(h[legacyFields.limit])
	reset, hasReset := maxReset(h[legacyFields.reset], now)
	if !hasReset {
		reset, hasReset = maxReset(h[fieldLegacyResetTime], now)
	}
	q.Reset = reset
	if q.Limit < 0 && q.Remaining < 0 && !hasReset {
		return statedQuota{}, false
	}
	if q.Window == 0 && q.Limit >= 0 {
		if p, ok := matchPolicy(statedQuota{Limit: q.Limit}, parseRateLimitPolicy(h[fieldRateLimitPolicy]...)); ok {
			q.Window = p.Window
		}
	}
	return q, true
}

func openAIQuota(h http.Header, now time.Time) (statedQuota, bool) {
	return kindsQuota(h, now, openAIFields)
}

func anthropicQuota(h http.Header, now time.Time) (statedQuota, bool) {
	return kindsQuota(h, now, anthropicFields)
}

// kindsQuota reads a family that states one quota per kind of unit and
// reports the most restrictive.
func kindsQuota(h http.Header, now time.Time, fields []quotaFields) (statedQuota, bool) {
	var best statedQuota
	found := false
	for _, f := range fields {
		q := statedQuota{Name: f.kind, Remaining: minCount(h[f.remaining])}
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

func xRateLimitQuota(h http.Header, now time.Time) (statedQuota, bool) {
	for _, f := range xRateLimitFields {
		q := statedQuota{Remaining: minCount(h[f.remaining])}
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
	return statedQuota{}, false
}

func shopifyQuota(h http.Header, _ time.Time) (statedQuota, bool) {
	for _, v := range h[fieldShopify] {
		if used, limit, ok := parseShopifyCallLimit(v); ok {
			return statedQuota{Limit: limit, Remaining: max(limit-used, 0)}, true
		}
	}
	return statedQuota{}, false
}

// limitField reads a RateLimit-Limit or X-RateLimit-Limit value: the
// expiring limit, optionally followed by quota policies as in
// "100, 100;w=60, 1000;w=3600" (drafts 00 to 05; Whoop spells w= as
// window=). It returns the expiring limit (-1 if none) and its window: the
// w= of the first member, else of a later policy with the same limit. A
// value that is no RFC 9651 List (a count beyond its 15 digits, say) is
// read as plain counts, the least of them, without a window.
func limitField(lines []string) (limit int64, window time.Duration) {
	limit = -1
	for _, m := range sfMembers(lines) {
		n, ok := sfCount(m.Value)
		if m.key != "" || !ok {
			continue
		}
		if limit < 0 {
			limit, window = n, m.window()
		} else if window == 0 && n == limit {
			window = m.window()
		}
	}
	if limit < 0 {
		limit = minCount(lines)
	}
	return limit, window
}

// minCount reads a count field: the least count among its lines and
// comma-separated members (parameters after ';' are ignored); -1 if none.
func minCount(lines []string) int64 {
	least := int64(-1)
	for _, s := range plainMembers(lines) {
		if n, ok := parseCount(s); ok && (least < 0 || n < least) {
			least = n
		}
	}
	return least
}

// plainMembers splits field lines that are not structured fields at their
// commas, and drops each member's parameters: "5;w=60, 4" reads as "5"
// and " 4".
func plainMembers(lines []string) []string {
	var out []string
	for _, line := range lines {
		for _, s := range strings.Split(line, ",") {
			s, _, _ = strings.Cut(s, ";")
			out = append(out, s)
		}
	}
	return out
}

// maxReset reads a reset field with parseReset: the longest reset among its
// lines, each read whole first (an HTTP-date has a comma) and else member
// by member.
func maxReset(lines []string, now time.Time) (time.Duration, bool) {
	return longestOf(lines, func(v string) (time.Duration, bool) { return parseReset(v, now) })
}

// retryAfterField reads the Retry-After lines like maxReset.
func retryAfterField(lines []string, now time.Time) (time.Duration, bool) {
	return longestOf(lines, func(v string) (time.Duration, bool) { return parseRetryAfter(v, now) })
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
		for _, s := range plainMembers([]string{line}) {
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

// sfMaxMembers is the most members read from one field.
const sfMaxMembers = 64

// sfMember is one member of a structured field: an Item, with its key when
// it is a Dictionary's member.
type sfMember struct {
	key string
	httpsfv.Item
}

// sfMembers reads field lines as RFC 9651 structured fields, with httpsfv
// and its strictness, one line at a time so that a malformed line hides
// only itself: each line as a List, or failing that as a Dictionary (the
// RateLimit field of draft-07). Inner lists are dropped; at most
// sfMaxMembers members are read.
func sfMembers(lines []string) []sfMember {
	var out []sfMember
	add := func(key string, m httpsfv.Member) {
		if it, ok := m.(httpsfv.Item); ok && len(out) < sfMaxMembers {
			out = append(out, sfMember{key: key, Item: it})
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

// param returns the value of the member's parameter k; nil when absent.
func (m sfMember) param(k string) any {
	v, _ := m.Params.Get(k)
	return v
}

// window reads the member's w= (or window=) parameter as seconds; 0 when
// absent or malformed.
func (m sfMember) window() time.Duration {
	w, ok := sfSeconds(m.param("w"))
	if !ok {
		w, _ = sfSeconds(m.param("window"))
	}
	return w
}

// sfName reads a String or a Token (a lenient spelling of a policy name).
func sfName(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case httpsfv.Token:
		return string(s), true
	}
	return "", false
}

// sfCount reads a non-negative Integer or Decimal as a count, without its
// fraction.
func sfCount(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		if n >= 0 {
			return n, true
		}
	case float64:
		if n >= 0 {
			return int64(n), true
		}
	}
	return 0, false
}

// sfSeconds reads a non-negative Integer or Decimal as delta-seconds, at
// most MaxStatedDuration. A Decimal has at most three fractional digits,
// so the result is a whole number of milliseconds.
func sfSeconds(v any) (time.Duration, bool) {
	var ms float64
	switch n := v.(type) {
	case int64:
		ms = float64(n) * 1000
	case float64:
		ms = math.Round(n * 1000)
	default:
		return 0, false
	}
	switch {
	case ms < 0:
		return 0, false
	case ms >= float64(MaxStatedDuration/time.Millisecond):
		return MaxStatedDuration, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

package downstream

import (
	"cmp"
	"encoding/json"
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

// Refusal says why a response refused its call.
type Refusal uint8

const (
	// NotRefused: the response did not refuse the call for its rate, its
	// concurrency or the downstream's load (it may have failed otherwise).
	NotRefused Refusal = iota
	// RateRefused: the call went over the caller's rate quota: status
	// 429; or 403 with Retry-After or with a remaining quota of 0, as
	// GitHub answers an exhausted limit.
	RateRefused
	// ConcurrencyRefused: the call went over a cap on the caller's calls
	// in flight, not over its rate: a 429 whose Stripe-Rate-Limited-Reason
	// is global-concurrency or endpoint-concurrency. Fewer calls in
	// flight help; a slower rate does not.
	ConcurrencyRefused
	// Overloaded: the downstream turned the call away for its own load,
	// whoever called: 503, or Anthropic's 529. The call cost no quota.
	Overloaded
)

// String names the refusal as the metrics label it: "", "rate",
// "concurrency", "overload".
func (r Refusal) String() string {
	switch r {
	case RateRefused:
		return "rate"
	case ConcurrencyRefused:
		return "concurrency"
	case Overloaded:
		return "overload"
	}
	return ""
}

// Units a Quota may count, as the vendors name them.
const (
	UnitRequests     = "requests"
	UnitTokens       = "tokens"
	UnitInputTokens  = "input-tokens"
	UnitOutputTokens = "output-tokens"
)

// Quota is one quota a response states: a count of units left, of a
// limit, until a reset.
type Quota struct {
	// Unit is what the quota counts when the vendor names it
	// (UnitRequests, UnitTokens, UnitInputTokens, UnitOutputTokens); ""
	// for a family whose quotas count unnamed units (requests, mostly).
	Unit string
	// Limit is the quota's size, -1 when unknown (or absurd: 0, or below
	// Remaining).
	Limit int64
	// Remaining is the units left, -1 when unknown.
	Remaining int64
	// Reset is the time until the quota resets, 0 when unknown.
	Reset time.Duration
	// Full reports that Reset is the time until the quota is whole again,
	// refilling steadily from the level stated (OpenAI, Azure OpenAI,
	// Anthropic, Shopify's leaky bucket): a quota at 0 frees its next unit
	// in about Reset/Limit. False: Reset is the end of a window (GitHub,
	// Twitter, the RateLimit fields, which tell a client not to assume the
	// whole quota back even then), and a quota at 0 frees nothing before.
	Full bool
}

// Next is how long until q frees its next unit: 0 while units are left
// or nothing is known; for a quota at 0, Reset/Limit (rounded up to a
// millisecond) when Full and Limit is known, else Reset.
func (q Quota) Next() time.Duration {
	switch {
	case q.Remaining != 0 || q.Reset <= 0:
		return 0
	case q.Full && q.Limit > 0:
		return ceilDuration(q.Reset / time.Duration(q.Limit))
	case q.Full:
		return 0 // steady, at a rate nobody said: the bucket paces it
	}
	return q.Reset
}

// maxQuotas is the most quotas a Feedback keeps: one per unit a vendor
// names (Anthropic names four).
const maxQuotas = 4

// Feedback is what one HTTP response says about the caller's limits:
// what sluice needs to decide a pause and to follow the API's own count.
// Feedback values compare with ==.
type Feedback struct {
	// Refused says why the response refused its call, if it did.
	Refused Refusal
	// RetryAfter is the wait the response asks for: retry-after-ms
	// (OpenAI's, in milliseconds) when valid, else Retry-After (a date
	// already past reads as 0); HasRetryAfter reports either.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Remaining, Limit, Reset and Full are those of the most restrictive
	// of the quotas the response states (Quotas): the least remaining,
	// then the longest reset. -1, -1, 0 when none is stated.
	Remaining int64
	Limit     int64
	Reset     time.Duration
	Full      bool
	// Resource is GitHub's X-RateLimit-Resource ("core", "search",
	// "graphql"): the quota the call counted against; "" when absent or
	// not a short name.
	Resource string
	// ConcurrencyReason and RateReason are a Stripe-Rate-Limited-Reason
	// read: see Refused.

	quotas [maxQuotas]Quota
	nq     uint8
}

// Quotas returns the quotas the response states, at most one per Unit
// (the most restrictive of a unit's), in the family's order.
func (f Feedback) Quotas() []Quota { return f.quotas[:f.nq] }

// Quota returns the quota stated for unit, false when none is.
func (f Feedback) Quota(unit string) (Quota, bool) {
	for _, q := range f.Quotas() {
		if q.Unit == unit {
			return q, true
		}
	}
	return Quota{}, false
}

// Next is how long until the API frees its next unit of every quota at
// 0, by what the response states (Quota.Next), Retry-After aside: 0 when
// no quota is at 0 or none says when.
func (f Feedback) Next() time.Duration {
	var d time.Duration
	for _, q := range f.Quotas() {
		d = max(d, q.Next())
	}
	return d
}

// ParseFeedback reads a response's status and headers. It never fails: a
// malformed value is ignored and its field stays unknown; so is an absurd
// one (a limit of 0, a remaining count above the limit). Header names
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
// The quotas come from one header family, the first in this order that
// states a remaining quota or a reset: RateLimit (draft-07 on, with
// RateLimit-Policy's q as the limit), RateLimit-Remaining and -Reset
// (drafts 00 to 06), OpenAI's and Azure OpenAI's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, Anthropic's
// anthropic-ratelimit-*, X-RateLimit-* (GitHub, Discord) or
// X-Rate-Limit-* (Twitter), HubSpot's X-HubSpot-RateLimit-*, Shopify's
// X-Shopify-Shop-Api-Call-Limit and Salesforce's Sforce-Limit-Info.
// Families are never mixed. docs/throttle.md (Vendor feedback) has a
// table of each family's fields and how they are read.
func ParseFeedback(status int, h http.Header, now time.Time) Feedback {
	if !statesLimits(h) {
		// Nothing below would read a field: Date is read only to date
		// the others. Most responses take this path.
		return Feedback{Refused: statusRefusal(status, false, -1, ""), Remaining: -1, Limit: -1}
	}
	return parseFeedback(status, h, now)
}

// statusRefusal is the refusal of a response of status with, or
// without, Retry-After, the least remaining count and Stripe's reason.
func statusRefusal(status int, hasRetryAfter bool, remaining int64, stripeReason string) Refusal {
	switch status {
	case http.StatusTooManyRequests:
		if strings.HasSuffix(stripeReason, "-concurrency") {
			return ConcurrencyRefused
		}
		return RateRefused
	case http.StatusServiceUnavailable, statusOverloaded:
		return Overloaded
	case http.StatusForbidden:
		if hasRetryAfter || remaining == 0 {
			return RateRefused
		}
	}
	return NotRefused
}

// statusOverloaded is Anthropic's 529, overloaded_error.
const statusOverloaded = 529

// limitPrefixes start the name of every field that parseFeedback reads
// but Date, in lower case: Retry-After (and retry-after-ms), and each
// family's fields.
var limitPrefixes = []string{"retry-after", "ratelimit", "x-ratelimit-", "x-rate-limit-", "anthropic-ratelimit-",
	"x-shopify-shop-api-call-limit", "x-hubspot-ratelimit-", "sforce-limit-info", "stripe-rate-limited-reason"}

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
	f := Feedback{Remaining: -1, Limit: -1}
	f.RetryAfter, f.HasRetryAfter = longest(h.Values("Retry-After-Ms"), now, parseMillis)
	if !f.HasRetryAfter {
		f.RetryAfter, f.HasRetryAfter = longest(h.Values("Retry-After"), now, parseRetryAfter)
	}
	for _, read := range families {
		if qs := read(h, now); len(qs) > 0 {
			f.setQuotas(qs)
			break
		}
	}
	if r := strings.ToLower(trimOWS(h.Get("X-Ratelimit-Resource"))); len(r) <= 32 && strings.Trim(r, "abcdefghijklmnopqrstuvwxyz_") == "" {
		f.Resource = r
	}
	f.Refused = statusRefusal(status, f.HasRetryAfter, f.Remaining, strings.ToLower(trimOWS(h.Get("Stripe-Rate-Limited-Reason"))))
	return f
}

// setQuotas keeps the most restrictive of qs per unit, and of them all
// as f's own fields. qs holds only quotas that state something.
func (f *Feedback) setQuotas(qs []Quota) {
	for _, q := range qs {
		if q.Limit == 0 || q.Limit < q.Remaining {
			q.Limit = -1 // absurd
		}
		i := slices.IndexFunc(f.quotas[:f.nq], func(k Quota) bool { return k.Unit == q.Unit })
		switch {
		case i >= 0:
			f.quotas[i] = stricter(f.quotas[i], q)
		case int(f.nq) < maxQuotas:
			f.quotas[f.nq] = q
			f.nq++
		}
	}
	top := f.quotas[0]
	for _, q := range f.Quotas()[1:] {
		top = stricter(top, q)
	}
	f.Remaining, f.Limit, f.Reset, f.Full = top.Remaining, top.Limit, top.Reset, top.Full
}

// stricter returns the more restrictive of a and b: the least remaining
// (unknown, -1, counts as plenty), then the longest reset; a on a tie.
func stricter(a, b Quota) Quota {
	if c := cmp.Or(cmp.Compare(uint64(a.Remaining), uint64(b.Remaining)), cmp.Compare(b.Reset, a.Reset)); c > 0 {
		return b
	}
	return a
}

// states reports whether q states a remaining count or a reset.
func (q Quota) states() bool { return q.Remaining >= 0 || q.Reset > 0 }

// families, in ParseFeedback's order of precedence. Each returns the
// quotas it states a remaining count or a reset of; none when it states
// neither.
var families = []func(h http.Header, now time.Time) []Quota{
	structuredQuota,
	// Drafts 00 to 06; RateLimit-ResetTime is GitLab's date.
	fields(fieldSet{limit: "RateLimit-Limit", remaining: "RateLimit-Remaining", reset: []string{"RateLimit-Reset", "RateLimit-ResetTime"}}),
	// OpenAI; Azure OpenAI has the same names, its resets in seconds.
	fields(kind(UnitRequests, "X-RateLimit-%s-Requests"), kind(UnitTokens, "X-RateLimit-%s-Tokens")),
	fields(kind(UnitRequests, "Anthropic-RateLimit-Requests-%s"), kind(UnitTokens, "Anthropic-RateLimit-Tokens-%s"),
		kind(UnitInputTokens, "Anthropic-RateLimit-Input-Tokens-%s"), kind(UnitOutputTokens, "Anthropic-RateLimit-Output-Tokens-%s")),
	// Reset-After (Discord) is a delta, immune to clock skew: before Reset.
	fields(
		fieldSet{limit: "X-RateLimit-Limit", remaining: "X-RateLimit-Remaining", used: "X-RateLimit-Used",
			reset: []string{"X-RateLimit-Reset-After", "X-RateLimit-Reset"}},
		fieldSet{limit: "X-Rate-Limit-Limit", remaining: "X-Rate-Limit-Remaining", reset: []string{"X-Rate-Limit-Reset"}}),
	hubspotQuota,
	shopifyQuota,
	salesforceQuota,
}

// fieldSet names the fields of one quota. Of the reset fields, the first
// with a readable value counts.
type fieldSet struct {
	unit        string
	remaining   string
	limit, used string // used is read when remaining is absent: limit - used (GitHub)
	reset       []string
	full        bool // the reset is the time until full (Quota.Full)
}

// kind names the fields of one unit by a pattern with %s for Limit,
// Remaining and Reset; its reset is the time until full.
func kind(unit, pattern string) fieldSet {
	f := func(part string) string { return strings.Replace(pattern, "%s", part, 1) }
	return fieldSet{unit: unit, limit: f("Limit"), remaining: f("Remaining"), reset: []string{f("Reset")}, full: true}
}

// fields reads a family with a field per count or reset.
func fields(sets ...fieldSet) func(http.Header, time.Time) []Quota {
	return func(h http.Header, now time.Time) []Quota {
		var qs []Quota
		for _, fs := range sets {
			q := Quota{Unit: fs.unit, Remaining: minCount(h.Values(fs.remaining)), Limit: limitField(h.Values(fs.limit)), Full: fs.full}
			if fs.used != "" && q.Remaining < 0 {
				if used := minCount(h.Values(fs.used)); used >= 0 && q.Limit >= 0 {
					q.Remaining = max(q.Limit-used, 0)
				}
			}
			for _, r := range fs.reset {
				var ok bool
				if q.Reset, ok = longest(h.Values(r), now, parseReset); ok {
					break
				}
			}
			if q.states() {
				qs = append(qs, q)
			}
		}
		return qs
	}
}

// structuredQuota reads RateLimit (draft-07 on), with RateLimit-Policy's
// quota q of the same name as the limit (draft-08 on).
func structuredQuota(h http.Header, _ time.Time) []Quota {
	qs := parseRateLimit(h.Values("RateLimit")...)
	if len(qs) == 0 {
		return nil
	}
	policies := map[string]int64{}
	for _, m := range sfMembers(h.Values("RateLimit-Policy")) {
		if q, ok := sfCount(m.param("q")); ok && m.key == "" {
			if name, ok := sfName(m.Value); ok {
				policies[name] = q
			}
		}
	}
	out := make([]Quota, 0, len(qs))
	for _, q := range qs {
		if limit, ok := policies[q.name]; ok && q.name != "" && q.Limit < 0 {
			q.Limit = limit
		}
		out = append(out, q.Quota)
	}
	return out
}

// sfName reads an item's String or Token value.
func sfName(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case httpsfv.Token:
		return string(s), true
	}
	return "", false
}

// hubspotQuota reads HubSpot's X-HubSpot-RateLimit-Max and -Remaining, in
// a rolling window of -Interval-Milliseconds (its Reset: a unit spent is
// back at the latest then), and -Daily and -Daily-Remaining, a day's.
func hubspotQuota(h http.Header, _ time.Time) []Quota {
	var qs []Quota
	q := Quota{Limit: limitField(h.Values("X-Hubspot-Ratelimit-Max")), Remaining: minCount(h.Values("X-Hubspot-Ratelimit-Remaining"))}
	if ms := minCount(h.Values("X-Hubspot-Ratelimit-Interval-Milliseconds")); ms > 0 {
		q.Reset = ceilDuration(time.Duration(min(ms, int64(MaxStatedDuration/time.Millisecond))) * time.Millisecond)
	}
	if q.Remaining >= 0 {
		qs = append(qs, q)
	}
	day := Quota{Limit: limitField(h.Values("X-Hubspot-Ratelimit-Daily")), Remaining: minCount(h.Values("X-Hubspot-Ratelimit-Daily-Remaining"))}
	if day.Remaining >= 0 {
		qs = append(qs, day)
	}
	return qs
}

// shopifyQuota reads the first valid X-Shopify-Shop-Api-Call-Limit:
// "32/40" is 32 calls used of a bucket of 40, which leaks steadily.
func shopifyQuota(h http.Header, _ time.Time) []Quota {
	for _, v := range h.Values("X-Shopify-Shop-Api-Call-Limit") {
		if q, ok := usedOf(v); ok {
			q.Full = true
			return []Quota{q}
		}
	}
	return nil
}

// salesforceQuota reads Sforce-Limit-Info: "api-usage=25/15000" is 25
// calls used of 15,000 in a rolling day; each name=used/max member is a
// quota (per-app-api-usage too).
func salesforceQuota(h http.Header, _ time.Time) []Quota {
	var qs []Quota
	for _, line := range h.Values("Sforce-Limit-Info") {
		for _, m := range strings.Split(line, ",") {
			_, v, ok := strings.Cut(m, "=")
			v, _, _ = strings.Cut(v, "(") // per-app-api-usage=17/250(appName=sample-app)
			if q, valid := usedOf(v); ok && valid && len(qs) < sfMaxMembers {
				qs = append(qs, q)
			}
		}
	}
	return qs
}

// usedOf reads "used/max" as a quota of max with max-used left (0 when
// overfull).
func usedOf(v string) (Quota, bool) {
	a, b, _ := strings.Cut(v, "/")
	used, uok := parseCount(a)
	limit, lok := parseCount(b)
	if !uok || !lok {
		return Quota{}, false
	}
	return Quota{Limit: limit, Remaining: max(limit-used, 0)}, true
}

// namedQuota is a quota of RateLimit with its policy's name.
type namedQuota struct {
	Quota
	name string
}

// parseRateLimit reads RateLimit lines: "default";r=50;t=30 (draft-08),
// a quota per named item with r= or t=, or limit=100, remaining=50,
// reset=30 (draft-07), one quota. Resets are delta-seconds.
func parseRateLimit(lines ...string) []namedQuota {
	var qs []namedQuota
	dict, inDict := namedQuota{Quota: Quota{Remaining: -1, Limit: -1}}, false
	for _, m := range sfMembers(lines) {
		n, isNumber := sfCount(m.Value)
		switch {
		case m.key == "":
			name, isName := sfName(m.Value) // a Token, leniently
			r, hasR := sfCount(m.param("r"))
			t, hasT := sfSeconds(m.param("t"))
			if isName && (hasR || hasT) {
				qs = append(qs, namedQuota{Quota: Quota{Remaining: r, Reset: t, Limit: -1}, name: name})
			}
		case m.key == "remaining" && isNumber:
			dict.Remaining, inDict = n, true
		case m.key == "reset" && isNumber:
			dict.Reset, inDict = sfSeconds(m.Value)
		case m.key == "limit" && isNumber:
			dict.Limit = n
		}
	}
	if inDict {
		qs = append(qs, dict)
	}
	return qs
}

// GraphQLCost reads the throttle status of a Shopify GraphQL response's
// body, extensions.cost.throttleStatus: currentlyAvailable points of
// maximumAvailable, restored at restoreRate a second, as a Quota that is
// Full in (maximumAvailable - currentlyAvailable) / restoreRate. False
// when body holds no valid status. It decodes the whole body: give it
// one that is in memory already.
func GraphQLCost(body []byte) (Quota, bool) {
	var doc struct {
		Extensions struct {
			Cost struct {
				ThrottleStatus struct {
					Max       *float64 `json:"maximumAvailable"`
					Available *float64 `json:"currentlyAvailable"`
					Restore   *float64 `json:"restoreRate"`
				} `json:"throttleStatus"`
			} `json:"cost"`
		} `json:"extensions"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return Quota{}, false
	}
	ts := doc.Extensions.Cost.ThrottleStatus
	if ts.Max == nil || ts.Available == nil || ts.Restore == nil {
		return Quota{}, false
	}
	limit, avail, rate := *ts.Max, *ts.Available, *ts.Restore
	if !(limit >= 1 && limit < 1e15 && avail >= 0 && avail <= limit && rate > 0 && rate < 1e15) {
		return Quota{}, false // absurd
	}
	secs := min((limit-avail)/rate, float64(MaxStatedDuration/time.Second))
	return Quota{Limit: int64(limit), Remaining: int64(avail), Reset: ceilDuration(time.Duration(secs * float64(time.Second))), Full: true}, true
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

// parseMillis reads retry-after-ms: milliseconds, with a fraction
// ("250.5") rounded up, at most MaxStatedDuration.
func parseMillis(v string, _ time.Time) (time.Duration, bool) {
	whole, frac, ok := decimal(trimOWS(v))
	if !ok {
		return 0, false
	}
	d := time.Duration(min(whole, uint64(MaxStatedDuration/time.Millisecond))) * time.Millisecond
	if strings.Trim(frac, "0") != "" {
		d = min(d+time.Millisecond, MaxStatedDuration)
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

package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// doc joins lines into a file, so that tests can count lines.
func doc(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

func mustParse(t *testing.T, data []byte) *Config {
	t.Helper()
	cfg, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v\n--- file:\n%s", err, data)
	}
	if err := checkInvariants(cfg); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	return cfg
}

func TestMinimal(t *testing.T) {
	cfg := mustParse(t, doc("queue:", "  bound: 5"))
	want := Queue{Name: "default", Bound: 5, Shards: 1, Prefetch: 64, MaxPayload: 1 << 20}
	if !reflect.DeepEqual(cfg.Queue, want) {
		t.Errorf("Queue = %+v, want %+v", cfg.Queue, want)
	}
	if cfg.Downstreams == nil || cfg.Tenants == nil || len(cfg.Downstreams)+len(cfg.Tenants) != 0 {
		t.Errorf("Downstreams = %v, Tenants = %v; want empty, non-nil maps", cfg.Downstreams, cfg.Tenants)
	}
	if _, ok := cfg.TenantPolicy("anyone"); ok {
		t.Errorf("TenantPolicy found an entry in a file without tenants")
	}
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  api:",
		"    rate: 3",
		"tenants:",
		"  t1: {}",
		"  t2:",
	))
	d := cfg.Downstreams["api"]
	wantLimit := throttle.Limit{Name: "api", Rate: 3, Per: time.Second, Burst: 1, MaxWait: 10 * time.Second}
	if d.Name != "api" || !reflect.DeepEqual(d.Limit, wantLimit) || d.Concurrency != nil || d.BaseURL != nil || d.PerTenant || d.Timeout != 30*time.Second {
		t.Errorf("downstream = %+v", d)
	}
	for _, id := range []string{"t1", "t2"} {
		if tn := cfg.Tenants[id]; tn.ID != id || tn.Policy != nil || tn.Weight != 1 {
			t.Errorf("tenant %s = %+v", id, tn)
		}
	}
}

func TestEveryField(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue:",
		"  name: jobs.v2-x_y",
		"  bound: 1_000",
		"  tenant_bound: 1000",
		"  shards: 16",
		"  prefetch: 7",
		"  max_payload: 512KiB",
		"  retention: 90m",
		"downstreams:",
		"  shop.api:",
		"    base_url: HTTPS://Shop.Example.com/admin/api/",
		"    rate: 40",
		"    per: 1m",
		"    burst: 5",
		"    max_wait: none",
		"    concurrency: 3",
		"    lease: 2m",
		"    per_tenant: true",
		"    timeout: 1500ms",
		"    max_refusals: 4",
		"tenants:",
		"  \"a:{b}\":",
		"    algorithm: gcra",
		"    limit: 5",
		"    period: 1s",
		"    burst: 10",
		"    weight: 100",
		"    class: gold.tier-2_abcdefghijklmnopqrst", // 32 bytes, the most
	))
	q := cfg.Queue
	if !reflect.DeepEqual(q, Queue{Name: "jobs.v2-x_y", Bound: 1000, TenantBound: 1000, Shards: 16, Prefetch: 7, MaxPayload: 512 << 10, Retention: 90 * time.Minute}) {
		t.Errorf("Queue = %+v", q)
	}
	d := cfg.Downstreams["shop.api"]
	if got := d.BaseURL.String(); got != "https://shop.example.com/admin/api/" {
		t.Errorf("BaseURL = %s", got)
	}
	if !reflect.DeepEqual(d.Limit, throttle.Limit{Name: "shop.api", Rate: 40, Per: time.Minute, Burst: 5, MaxWait: throttle.NoWait}) {
		t.Errorf("Limit = %+v", d.Limit)
	}
	if d.Concurrency == nil || *d.Concurrency != (throttle.Concurrency{Name: "shop.api", Max: 3, Lease: 2 * time.Minute}) {
		t.Errorf("Concurrency = %+v", d.Concurrency)
	}
	if !d.PerTenant || d.Timeout != 1500*time.Millisecond || d.MaxRefusals != 4 {
		t.Errorf("PerTenant = %v, Timeout = %v, MaxRefusals = %d", d.PerTenant, d.Timeout, d.MaxRefusals)
	}
	tn := cfg.Tenants["a:{b}"]
	want := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: 5, Period: time.Second, Burst: 10}
	if tn.ID != "a:{b}" || tn.Policy == nil || *tn.Policy != want || tn.Weight != 100 || tn.Class != "gold.tier-2_abcdefghijklmnopqrst" {
		t.Errorf("tenant = %+v (policy %v)", tn, tn.Policy)
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{
		"1":         1,
		"65536":     65536,
		"\"65536\"": 65536,
		"100B":      100,
		"1 KiB":     1024,
		"3KiB":      3 << 10,
		"64MiB":     64 << 20,
		"1_024KiB":  1 << 20,
	} {
		cfg, err := Parse(doc("queue: {bound: 1, max_payload: " + in + "}"))
		if err != nil {
			t.Errorf("max_payload %s: %v", in, err)
			continue
		}
		if cfg.Queue.MaxPayload != want {
			t.Errorf("max_payload %s = %d, want %d", in, cfg.Queue.MaxPayload, want)
		}
	}
}

func TestTenantIDs(t *testing.T) {
	long := strings.Repeat("x", queue.MaxTenantLen)
	colons := strings.Repeat("a:", queue.MaxTenantLen/2) // needs quotes, and then the explicit key form
	cfg := mustParse(t, doc(
		"queue: {bound: 1}",
		"tenants:",
		"  12345: {weight: 2}",
		"  true: {weight: 3}",
		"  \"~\": {weight: 4}",
		"  'with space': {weight: 5}",
		"  \"line\\nbreak\": {weight: 6}",
		"  "+long+": {weight: 7}",
		"  \"{tag}\": {weight: 8}",
		"  default: {weight: 9}",
		"  ? \""+colons+"\"",
		"  : {weight: 10}",
	))
	for id, w := range map[string]int{"12345": 2, "true": 3, "~": 4, "with space": 5, "line\nbreak": 6, long: 7, "{tag}": 8, "default": 9, colons: 10} {
		tn, ok := cfg.TenantPolicy(id)
		if !ok || tn.ID != id || tn.Weight != w {
			t.Errorf("TenantPolicy(%.20q) = %+v, %v; want weight %d", id, tn, ok, w)
		}
	}
	if tn, ok := cfg.TenantPolicy("unlisted"); !ok || tn.ID != "default" || tn.Weight != 9 {
		t.Errorf("TenantPolicy(unlisted) = %+v, %v; want the default entry", tn, ok)
	}
}

// TestAliasesAndMergeKeysRefused: an alias or a merge key is refused
// where it is written, so that each problem has the line to change; a
// file of aliases that would expand to a huge document (each level
// merging the one before twice) is refused at its first, having walked
// each node once.
func TestAliasesAndMergeKeysRefused(t *testing.T) {
	const alias, merge = "aliases (*name) are not taken: write the value out", "merge keys (<<) are not taken: write the keys out"
	for _, c := range []struct {
		name string
		doc  []byte
		want []string
	}{
		{"an alias as a value", doc("queue: {bound: 1}", "tenants:", "  d: &d {weight: 2}", "  a: *d"), []string{"line 4:6: tenants.a: " + alias}},
		{"a merge key", doc("queue: {bound: 1}", "tenants:", "  d: &d {weight: 2}", "  a:", "    <<: *d", "    weight: 3"), []string{"line 5:5: tenants.a: " + merge}},
		{"an alias in a list", doc("queue: {bound: 1}", "downstreams:", "  s: {rate: 1, also: [&r {rate: 2}, *r]}"), []string{"line 3:37: downstreams.s.also[1]: " + alias}},
		{"an alias as a key", doc("queue: {bound: 1}", "tenants:", "  &k a: {weight: 1}", "  *k : {weight: 2}"), []string{"line 4:3: tenants: " + alias}},
		{"an alias that contains itself", doc("queue: {bound: 1}", "tenants: &t {a: *t}"), []string{"line 2:17: tenants.a: " + alias}},
		{"a merge of the root", doc("<<: {queue: {bound: 3}}"), []string{"line 1:1: " + merge}},
	} {
		_, err := Parse(c.doc)
		var list ErrorList
		if !errors.As(err, &list) || len(list) < len(c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
			continue
		}
		for i, w := range c.want {
			if got := list[i].Error(); got != w {
				t.Errorf("%s: problem %d is %q; want %q", c.name, i, got, w)
			}
		}
	}
	lines := []string{"queue: {bound: 1}", "tenants:", "  l0: &l0 {weight: 1}"}
	for i := 1; i <= 40; i++ {
		lines = append(lines, fmt.Sprintf("  l%d: &l%d {<<: [*l%d, *l%d], weight: 1}", i, i, i-1, i-1))
	}
	_, err := Parse(doc(lines...))
	var list ErrorList
	if !errors.As(err, &list) || list[0].Error() != "line 4:12: tenants.l1: "+merge {
		t.Errorf("a merge bomb: %v; want it refused at its first merge key", err)
	}
}

func TestTenantPolicy(t *testing.T) {
	var empty Config
	if _, ok := empty.TenantPolicy("x"); ok {
		t.Error("zero Config found a tenant")
	}
	cfg := mustParse(t, doc(
		"queue: {bound: 1}",
		"tenants:",
		"  acme: {algorithm: fixed_window, limit: 3, period: 1s}",
		"  free: {weight: 2}",
	))
	if tn, ok := cfg.TenantPolicy("acme"); !ok || tn.Policy == nil || tn.Policy.Limit != 3 {
		t.Errorf("acme = %+v, %v", tn, ok)
	}
	if tn, ok := cfg.TenantPolicy("free"); !ok || tn.Policy != nil || tn.Weight != 2 {
		t.Errorf("free = %+v, %v", tn, ok)
	}
	if _, ok := cfg.TenantPolicy("other"); ok {
		t.Error("found an entry for an unlisted tenant without a default")
	}
}

// TestErrors checks, for each bad file, the exact place, field and message
// of its problems.
func TestErrors(t *testing.T) {
	const q = "queue: {bound: 10}"
	tests := []struct {
		name string
		data []byte
		want []string // substrings of the error, each naming line and field
	}{
		{"empty", []byte(""), []string{"line 1: queue.bound: required; the file is empty"}},
		{"comments only", doc("# nothing"), []string{"line 1: queue.bound: required"}},
		{"null", doc("~"), []string{"line 1: queue.bound: required"}},
		{"no queue", doc("tenants: {}"), []string{"line 1:1: queue.bound: required; the file has no queue section"}},
		{"no bound", doc("queue:", "  name: q"), []string{"line 1:1: queue.bound: required"}},
		{"queue null", doc("queue:"), []string{"line 1:1: queue.bound: required"}},
		{"not a mapping", doc("- a", "- b"), []string{"line 1:1: must be a mapping of keys to values, got a list"}},
		{"scalar document", doc("hello"), []string{"line 1:1: must be a mapping of keys to values, got the string \"hello\""}},
		{"queue a list", doc("queue: [1]"), []string{"line 1:8: queue: must be a mapping of keys to values, got a list"}},
		{"bad yaml", doc("queue:", "  bound: 1", "x: [", ""), []string{"not valid YAML: did not find expected node content"}},
		{"bad yaml line", doc("queue:", "  bound: 1", "  a: b: c"), []string{"line 3: not valid YAML: mapping values are not allowed in this context"}},
		{"two documents", doc(q, "---", q), []string{"line 3:1: a policy file holds one YAML document"}},
		{"unknown top", doc(q, "tenant: {}"), []string{"line 2:1: tenant: unknown field; did you mean \"tenants\"?"}},
		{"unknown far", doc(q, "zzzzzzz: 1"), []string{"line 2:1: zzzzzzz: unknown field; expected one of queue, downstreams, tenants"}},
		{"duplicate top", doc(q, "tenants: {}", q), []string{"line 3:1: queue: defined twice: first at line 1, again at line 3"}},

		{"bound zero", doc("queue:", "  bound: 0"), []string{"line 2:10: queue.bound: must be at least 1, got 0"}},
		{"bound negative", doc("queue:", "  bound: -5"), []string{"line 2:10: queue.bound: must be at least 1, got -5"}},
		{"bound huge", doc("queue:", "  bound: 99999999999999"), []string{"line 2:10: queue.bound: must be at most 1099511627776, got 99999999999999"}},
		{"bound overflow", doc("queue:", "  bound: 99999999999999999999"), []string{"line 2:10: queue.bound: 99999999999999999999 is out of range"}},
		{"bound float", doc("queue:", "  bound: 1.5"), []string{"line 2:10: queue.bound: must be a whole number in decimal digits, got 1.5"}},
		{"bound exponent", doc("queue:", "  bound: 1e5"), []string{"line 2:10: queue.bound: must be a whole number in decimal digits, got 1e5"}},
		{"bound hex", doc("queue:", "  bound: 0x10"), []string{"line 2:10: queue.bound: must be a whole number in decimal digits, got 0x10"}},
		{"bound octal", doc("queue:", "  bound: 010"), []string{"line 2:10: queue.bound: must be a whole number in decimal digits, got 010 (a leading zero"}},
		{"bound quoted", doc("queue:", "  bound: \"10\""), []string{"line 2:10: queue.bound: must be a whole number, got the string \"10\""}},
		{"bound bool", doc("queue:", "  bound: true"), []string{"line 2:10: queue.bound: must be a whole number, got true"}},
		{"bound null", doc("queue:", "  bound:"), []string{"line 2:9: queue.bound: has no value"}},
		{"bound list", doc("queue:", "  bound: [1]"), []string{"line 2:10: queue.bound: must be a single value, got a list"}},
		{"bound tagged", doc("queue:", "  bound: !secret 10"), []string{"line 2:10: queue.bound: unsupported tag !secret"}},
		{"duplicate field", doc("queue:", "  bound: 1", "  bound: 2"), []string{"line 3:3: queue.bound: defined twice: first at line 2, again at line 3"}},
		{"tenant_bound above bound", doc("queue:", "  bound: 10", "  tenant_bound: 11"), []string{"line 3:17: queue.tenant_bound: must be at most queue.bound (10), got 11"}},
		{"tenant_bound negative", doc("queue:", "  bound: 10", "  tenant_bound: -1"), []string{"line 3:17: queue.tenant_bound: must be at least 0, got -1"}},
		{"queue name", doc("queue:", "  bound: 1", "  name: \"a b\""), []string{"line 3:9: queue.name: must be 1 to 64 characters of A-Z, a-z, 0-9, _, . and -, got the string \"a b\""}},
		{"queue name long", doc("queue:", "  bound: 1", "  name: "+strings.Repeat("n", 65)), []string{"line 3:9: queue.name: must be 1 to 64 characters"}},
		{"queue name empty", doc("queue:", "  bound: 1", "  name: ''"), []string{"line 3:9: queue.name: must be 1 to 64 characters"}},
		{"prefetch zero", doc("queue:", "  bound: 1", "  prefetch: 0"), []string{"line 3:13: queue.prefetch: must be at least 1, got 0"}},
		{"prefetch huge", doc("queue:", "  bound: 1", "  prefetch: 2000000"), []string{"line 3:13: queue.prefetch: must be at most 1000000, got 2000000"}},
		{"max_payload zero", doc("queue:", "  bound: 1", "  max_payload: 0"), []string{"line 3:16: queue.max_payload: must be at least 1B, got 0"}},
		{"max_payload MB", doc("queue:", "  bound: 1", "  max_payload: 1MB"), []string{"line 3:16: queue.max_payload: must be a size such as 65536, 512KiB or 1MiB, got the string \"1MB\""}},
		{"max_payload huge", doc("queue:", "  bound: 1", "  max_payload: 65MiB"), []string{"line 3:16: queue.max_payload: must be at most 64MiB, got 65MiB"}},
		{"max_payload overflow", doc("queue:", "  bound: 1", "  max_payload: 9999999999999999MiB"), []string{"line 3:16: queue.max_payload: must be at most 64MiB"}},
		{"max_payload negative", doc("queue:", "  bound: 1", "  max_payload: -1"), []string{"line 3:16: queue.max_payload: must be at least 1B, got -1"}},
		{"retention negative", doc("queue:", "  bound: 1", "  retention: -5m"), []string{"line 3:14: queue.retention: must not be negative, got -5m0s"}},
		{"retention long", doc("queue:", "  bound: 1", "  retention: 8760h"), []string{"line 3:14: queue.retention: must be between 0s and 720h0m0s, got 8760h0m0s"}},
		{"retention number", doc("queue:", "  bound: 1", "  retention: 3600"), []string{"line 3:14: queue.retention:"}},
		{"queue typo", doc("queue:", "  bound: 1", "  prefech: 3"), []string{"line 3:3: queue.prefech: unknown field; did you mean \"prefetch\"?"}},
		{"types not a list", doc("queue:", "  bound: 1", "  types: email.send"), []string{"line 3:10: queue.types: must be a list of job types such as [email.send, report.build], got the string \"email.send\""}},
		{"types null item", doc("queue:", "  bound: 1", "  types: [a, ~]"), []string{"line 3:14: queue.types[1]: has no value"}},
		{"types bad name", doc("queue:", "  bound: 1", "  types: [a, \"b c\"]"), []string{"line 3:14: queue.types[1]: a job type is 1 to 256 characters of A-Z, a-z, 0-9, _, ., :, / and -, got the string \"b c\""}},
		{"types twice", doc("queue:", "  bound: 1", "  types: [a, b, a]"), []string{"line 3:17: queue.types[2]: \"a\" is listed twice (first as queue.types[0])"}},
		{"types mapping item", doc("queue:", "  bound: 1", "  types: [{a: 1}]"), []string{"line 3:11: queue.types[0]: must be a single value, got a mapping"}},
		{"tenant not NFC", doc(q, "tenants:", "  \"cafe\\u0301\": {weight: 2}"), []string{"line 3:3: tenants[\"cafe\u0301\"]: a tenant id must be in Unicode normalization form C (NFC), as jobs name it: write \"caf\\u00e9\""}},
		{"types too many", doc("queue:", "  bound: 1", "  types: ["+strings.Repeat("t,", 1000)+"t]"), []string{"line 3:10: queue.types: may list at most 1000 job types, got 1001"}},

		{"rate zero", doc(q, "downstreams:", "  shopify:", "    rate: 0"), []string{"line 4:11: downstreams.shopify.rate: must be at least 1, got 0"}},
		{"rate missing", doc(q, "downstreams:", "  shopify:", "    per: 1s"), []string{"line 3:3: downstreams.shopify.rate: required"}},
		{"rate missing null entry", doc(q, "downstreams:", "  shopify:"), []string{"line 3:3: downstreams.shopify.rate: required"}},
		{"rate huge", doc(q, "downstreams:", "  s:", "    rate: 2000000000000"), []string{"line 4:11: downstreams.s.rate: must be at most 1099511627776, got 2000000000000"}},
		{"per bare number", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: 1"), []string{"line 5:10: downstreams.s.per: a duration needs a unit, such as \"1s\" or \"1ms\"; got the number 1"}},
		{"per zero", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: 0"), []string{"line 5:10: downstreams.s.per: a duration needs a unit"}},
		{"per quoted zero", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: \"0\""), []string{"line 5:10: downstreams.s.per: a duration needs a unit"}},
		{"per too short", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: 100us"), []string{"line 5:10: downstreams.s.per: must be between 1ms and 8784h0m0s, got 100µs"}},
		{"per fraction of µs", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: 1000500ns"), []string{"line 5:10: downstreams.s.per: must be a whole number of microseconds, got 1.0005ms"}},
		{"per garbage", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: soon"), []string{"line 5:10: downstreams.s.per: must be a duration such as \"10s\", \"500ms\" or \"1m30s\", got the string \"soon\""}},
		{"per negative", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: -1s"), []string{"line 5:10: downstreams.s.per: must not be negative, got -1s"}},
		{"burst zero", doc(q, "downstreams:", "  s:", "    rate: 1", "    burst: 0"), []string{"line 5:12: downstreams.s.burst: must be at least 1, got 0"}},
		{"burst too fine", doc(q, "downstreams:", "  s:", "    rate: 1", "    per: 8784h", "    burst: 1099511627776"), []string{"line 6:12: downstreams.s.burst: 1099511627776 units at 1 per 8784h0m0s is too fine-grained"}},
		{"max_wait negative", doc(q, "downstreams:", "  s:", "    rate: 1", "    max_wait: -1s"), []string{"line 5:15: downstreams.s.max_wait: must not be negative, got -1s; or none, for only a slot due now"}},
		{"max_wait huge", doc(q, "downstreams:", "  s:", "    rate: 1", "    max_wait: 25h"), []string{"line 5:15: downstreams.s.max_wait: must be between 1ms and 24h0m0s, or none for only a slot due now (leave it out for the default 10s), got 25h0m0s"}},
		{"max_wait zero", doc(q, "downstreams:", "  s:", "    rate: 1", "    max_wait: 0s"), []string{"line 5:15: downstreams.s.max_wait: must be between 1ms and 24h0m0s, or none for only a slot due now (leave it out for the default 10s), got 0s"}},
		{"max_wait garbage", doc(q, "downstreams:", "  s:", "    rate: 1", "    max_wait: never"), []string{"line 5:15: downstreams.s.max_wait: must be a duration such as \"10s\", \"500ms\" or \"1m30s\", got the string \"never\"; or none, for only a slot due now"}},
		{"max_refusals zero", doc(q, "downstreams:", "  s:", "    rate: 1", "    max_refusals: 0"), []string{"line 5:19: downstreams.s.max_refusals: must be at least 1, got 0"}},
		{"concurrency negative", doc(q, "downstreams:", "  s:", "    rate: 1", "    concurrency: -1"), []string{"line 5:18: downstreams.s.concurrency: must be at least 0, got -1"}},
		{"lease zero", doc(q, "downstreams:", "  s:", "    rate: 1", "    concurrency: 1", "    lease: 0s"), []string{"line 6:12: downstreams.s.lease: must be between 100ms and 24h0m0s, got 0s"}},
		{"lease too short to extend", doc(q, "downstreams:", "  s:", "    rate: 1", "    concurrency: 1", "    lease: 10ms"), []string{"line 6:12: downstreams.s.lease: must be between 100ms and 24h0m0s, got 10ms"}},
		{"per_tenant yes", doc(q, "downstreams:", "  s:", "    rate: 1", "    per_tenant: yes"), []string{"line 5:17: downstreams.s.per_tenant: must be true or false, got the string \"yes\""}},
		{"timeout bare", doc(q, "downstreams:", "  s:", "    rate: 1", "    timeout: 30"), []string{"line 5:14: downstreams.s.timeout: a duration needs a unit"}},
		{"downstream typo", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_ulr: https://a.com/"), []string{"line 5:5: downstreams.s.base_ulr: unknown field; did you mean \"base_url\"?"}},
		{"downstream name", doc(q, "downstreams:", "  \"bad name\": {rate: 1}"), []string{"line 3:3: downstreams[\"bad name\"]: a downstream's name must be 1 to 64 characters"}},
		{"downstream duplicate", doc(q, "downstreams:", "  s: {rate: 1}", "  t: {rate: 1}", "  s: {rate: 2}"), []string{"line 5:3: downstreams.s: defined twice: first at line 3, again at line 5"}},
		{"downstream not mapping", doc(q, "downstreams:", "  s: 5"), []string{"line 3:6: downstreams.s: must be a mapping of keys to values, got the number 5"}},
		{"downstreams list", doc(q, "downstreams:", "  - s"), []string{"line 3:3: downstreams: must be a mapping of keys to values, got a list"}},

		{"base_url scheme", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: ftp://a.com/"), []string{"line 5:15: downstreams.s.base_url: not an absolute http or https URL such as https://api.example.com/v1/; got scheme \"ftp\""}},
		{"base_url relative", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: /api"), []string{"line 5:15: downstreams.s.base_url: not an absolute http or https URL such as https://api.example.com/v1/; got scheme \"\""}},
		{"base_url no host", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https:///api"), []string{"line 5:15: downstreams.s.base_url: the URL has no host, as api.example.com in https://api.example.com/v1/"}},
		{"base_url opaque", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https:a.com/api"), []string{"line 5:15: downstreams.s.base_url: the URL has no host"}},
		{"base_url userinfo", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https://user:pw@a.com/"), []string{"line 5:15: downstreams.s.base_url: \"https://a.com/\" carries user info (user@ or user:password@); send credentials in headers"}},
		{"base_url query", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https://a.com/?x=1"), []string{"line 5:15: downstreams.s.base_url: must not have a query"}},
		{"base_url fragment", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: \"https://a.com/#x\""), []string{"line 5:15: downstreams.s.base_url: must not have a fragment"}},
		{"base_url dots", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https://a.com/api/../admin"), []string{"line 5:15: downstreams.s.base_url: \"https://a.com/api/../admin\" has a . or .. path segment"}},
		{"base_url path parameter", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https://a.com/api;v=1"), []string{"line 5:15: downstreams.s.base_url: \"https://a.com/api;v=1\" has a ; in its path (a path parameter to some servers"}},
		{"base_url double-encoded dot", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https://a.com/api/%252e%252e/admin"), []string{"line 5:15: downstreams.s.base_url: \"https://a.com/api/%252e%252e/admin\" has a %25 that encodes a dot or a slash in its path"}},
		{"base_url port", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: https://a.com:99999/"), []string{"line 5:15: downstreams.s.base_url: \"https://a.com:99999/\": port \"99999\" must be between 1 and 65535"}},
		{"base_url bad", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: \"https://a b.com/\""), []string{"line 5:15: downstreams.s.base_url: not a valid URL: invalid character in host name"}},
		{"base_url password with a slash", doc(q, "downstreams:", "  s:", "    rate: 1", "    base_url: \"https://u:Pw5ecret/x@a.com/\""), []string{"line 5:15: downstreams.s.base_url: not a valid URL: invalid port after host"}},
		{"base_url shared", doc(q, "downstreams:", "  s: {rate: 1, base_url: https://a.com/api}", "  t: {rate: 1, base_url: HTTPS://A.COM:443/api/}"), []string{"line 4:26: downstreams.t.base_url: the same base_url as downstreams.s (line 3)"}},

		{"tenant typo", doc(q, "tenants:", "  acme:", "    algorithm: gcra", "    limt: 10"), []string{"line 5:5: tenants.acme.limt: unknown field; did you mean \"limit\"?"}},
		{"tenant unknown", doc(q, "tenants:", "  acme:", "    colour: red"), []string{"line 4:5: tenants.acme.colour: unknown field; expected one of algorithm, limit, period, burst, weight"}},
		{"tenant limit zero", doc(q, "tenants:", "  acme:", "    algorithm: gcra", "    limit: 0", "    period: 1s"), []string{"line 5:12: tenants.acme.limit: must be at least 1, got 0"}},
		{"tenant algorithm missing", doc(q, "tenants:", "  acme:", "    limit: 5", "    period: 1s"), []string{"line 3:3: tenants.acme.algorithm: missing; one of [fixed_window sliding_window_log sliding_window_counter token_bucket gcra]"}},
		{"tenant algorithm unknown", doc(q, "tenants:", "  acme:", "    algorithm: leaky", "    limit: 5", "    period: 1s"), []string{"line 4:16: tenants.acme.algorithm: unknown algorithm \"leaky\"; one of"}},
		{"tenant period missing", doc(q, "tenants:", "  acme:", "    algorithm: gcra", "    limit: 5"), []string{"line 3:3: tenants.acme.period: must be between 1ms and 8784h0m0s, got 0s"}},
		{"tenant period bare", doc(q, "tenants:", "  acme:", "    algorithm: gcra", "    limit: 5", "    period: 60"), []string{"line 6:13: tenants.acme.period: a duration needs a unit, such as \"60s\" or \"60ms\"; got the number 60"}},
		{"tenant burst window", doc(q, "tenants:", "  \"shop:1\":", "    algorithm: fixed_window", "    limit: 5", "    period: 1s", "    burst: 3"), []string{"line 7:12: tenants[\"shop:1\"].burst: fixed_window has no burst; leave it 0"}},
		{"tenant burst negative", doc(q, "tenants:", "  a:", "    algorithm: token_bucket", "    limit: 5", "    period: 1s", "    burst: -3"), []string{"line 7:12: tenants.a.burst: must not be negative, got -3"}},
		{"tenant log too big", doc(q, "tenants:", "  a:", "    algorithm: sliding_window_log", "    limit: 100001", "    period: 1s"), []string{"line 5:12: tenants.a.limit: sliding_window_log stores one entry per unit and allows at most 100000"}},
		{"tenant weight zero", doc(q, "tenants:", "  a: {weight: 0}"), []string{"line 3:15: tenants.a.weight: must be at least 1, got 0"}},
		{"tenant weight high", doc(q, "tenants:", "  a: {weight: 101}"), []string{"line 3:15: tenants.a.weight: must be at most 100, got 101"}},
		{"tenant class space", doc(q, "tenants:", "  a: {class: gold tier}"), []string{"line 3:14: tenants.a.class: use 1 to 32 bytes of [A-Za-z0-9_.-], got \"gold tier\""}},
		{"tenant class empty", doc(q, "tenants:", "  a: {class: \"\"}"), []string{"line 3:14: tenants.a.class: use 1 to 32 bytes of [A-Za-z0-9_.-], got \"\""}},
		{"tenant class long", doc(q, "tenants:", "  a: {class: "+strings.Repeat("g", 33)+"}"), []string{"line 3:14: tenants.a.class: use 1 to 32 bytes of [A-Za-z0-9_.-], got \"" + strings.Repeat("g", 33) + "\""}},
		{"tenant class cut", doc(q, "tenants:", "  a: {class: "+strings.Repeat("g", 50)+"}"), []string{"got \"" + strings.Repeat("g", 40) + "…\""}},
		{"tenant duplicate", doc(q, "tenants:", "  acme: {weight: 1}", "  other: {}", "  acme: {weight: 2}"), []string{"line 5:3: tenants.acme: defined twice: first at line 3, again at line 5"}},
		{"tenant duplicate spelled differently", doc(q, "tenants:", "  12345: {}", "  \"12345\": {}"), []string{"line 4:3: tenants.12345: defined twice: first at line 3, again at line 4"}},
		{"tenant empty id", doc(q, "tenants:", "  \"\": {}"), []string{"line 3:3: tenants[\"\"]: a tenant id must not be empty"}},
		{"tenant null id", doc(q, "tenants:", "  ~: {}"), []string{"line 3:3: tenants: a key must not be null (quote it to use \"~\")"}},
		{"tenant long id", doc(q, "tenants:", "  ? "+strings.Repeat("y", 1025), "  : {}"), []string{"line 3:5: tenants[\"yyyyyyyy", "a tenant id must be at most 1024 bytes, got 1025"}},
		{"tenant list key", doc(q, "tenants:", "  ? [a]", "  : {}"), []string{"line 3:5: tenants: keys must be plain values, got a list"}},
		{"tenant not mapping", doc(q, "tenants:", "  a: fast"), []string{"line 3:6: tenants.a: must be a mapping of keys to values, got the string \"fast\""}},

		{"bound 2^62", doc("queue:", "  bound: 4611686018427387904"), []string{"line 2:10: queue.bound: must be at most 1099511627776, got 4611686018427387904"}},
		{"limit beyond int64", doc(q, "tenants:", "  a: {algorithm: gcra, limit: 9223372036854775808, period: 1s}"), []string{"line 3:31: tenants.a.limit: 9223372036854775808 is out of range"}},
		{"tenant_bound exponent", doc("queue:", "  bound: 10", "  tenant_bound: 1e3"), []string{"line 3:17: queue.tenant_bound: must be a whole number in decimal digits, got 1e3"}},
		{"several problems in order", doc(
			"queue:",
			"  bound: 0",
			"downstreams:",
			"  s: {rate: 0}",
			"tenants:",
			"  a: {weight: 0}",
		), []string{
			"line 2:10: queue.bound: must be at least 1, got 0\n" +
				"line 4:13: downstreams.s.rate: must be at least 1, got 0\n" +
				"line 6:15: tenants.a.weight: must be at least 1, got 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse(tt.data)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v\n--- file:\n%s", cfg, tt.data)
			}
			if cfg != nil {
				t.Errorf("Parse returned a Config with its error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is %T, want a non-empty ErrorList", err)
			}
			for _, e := range list {
				if e.Line < 1 {
					t.Errorf("problem without a line: %v", e)
				}
			}
		})
	}
}

func TestPolicyErrorsWrap(t *testing.T) {
	_, err := Parse(doc("queue: {bound: 1}", "tenants:", "  a: {algorithm: gcra, limit: 0, period: 1s}"))
	if !errors.Is(err, algorithms.ErrInvalidPolicy) {
		t.Errorf("errors.Is(%v, ErrInvalidPolicy) = false", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 3 || e.Column != 31 || e.Field != "tenants.a.limit" || e.Msg != "must be at least 1, got 0" {
		t.Errorf("first *Error = %+v", e)
	}
}

func TestTooManyErrors(t *testing.T) {
	lines := []string{"queue: {bound: 1}", "tenants:"}
	for i := range 30 {
		lines = append(lines, "  t"+strings.Repeat("x", i)+": {weight: 0}")
	}
	_, err := Parse(doc(lines...))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err = %v", err)
	}
	if len(list) != MaxErrors+1 || list[MaxErrors].Msg != "10 more problems not shown" {
		t.Errorf("got %d problems, last %q", len(list), list[len(list)-1].Msg)
	}
	if list[0].Line != 3 || list[MaxErrors-1].Line != MaxErrors+2 {
		t.Errorf("problems not in file order: first line %d, last line %d", list[0].Line, list[MaxErrors-1].Line)
	}

	// Beyond the problems kept while parsing, the count stays exact.
	lines = []string{"queue: {bound: 1}", "tenants:"}
	for i := range 1500 {
		lines = append(lines, fmt.Sprintf("  t%d: {weight: 0, colour: red}", i))
	}
	_, err = Parse(doc(lines...))
	if !errors.As(err, &list) || len(list) != MaxErrors+1 || list[MaxErrors].Msg != "2980 more problems not shown" {
		t.Errorf("got %d problems, last %q", len(list), list[len(list)-1].Msg)
	}
}

// TestBigFile checks that a large file parses.
func TestBigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	var b strings.Builder
	b.WriteString("queue: {bound: 1}\ntenants:\n")
	for i := range 20_000 {
		fmt.Fprintf(&b, "  t%d: {algorithm: gcra, limit: %d, period: 1s, burst: 2, weight: 3}\n", i, i+1)
	}
	cfg := mustParse(t, []byte(b.String()))
	if len(cfg.Tenants) != 20_000 || cfg.Tenants["t19999"].Policy.Limit != 20_000 {
		t.Errorf("got %d tenants", len(cfg.Tenants))
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(good, doc("queue:", "  bound: 3"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(good)
	if err != nil || cfg.Queue.Bound != 3 {
		t.Fatalf("Load = %+v, %v", cfg, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, doc("queue:", "  bound: 3", "downstreams:", "  shopify:", "    rate: 0", "    per: 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	want := bad + ":5:11: downstreams.shopify.rate: must be at least 1, got 0\n" +
		bad + ":6:10: downstreams.shopify.per: a duration needs a unit, such as \"1s\" or \"1ms\"; got the number 1"
	if err == nil || err.Error() != want {
		t.Errorf("Load error:\n%v\nwant:\n%s", err, want)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = Load(missing)
	if err == nil || !strings.HasPrefix(err.Error(), missing+": open: ") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		t.Errorf("Load(missing) does not wrap *fs.PathError: %v", err)
	}

	_, err = Load(dir)
	if err == nil || !strings.HasPrefix(err.Error(), dir+": ") {
		t.Errorf("Load(dir) = %v", err)
	}

	big := filepath.Join(dir, "big.yaml")
	data := append(doc("queue: {bound: 1}"), []byte(strings.Repeat("# padding\n", MaxFileSize/10+1))...)
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big)
	if err == nil || err.Error() != big+": the file is larger than 16777216 bytes" {
		t.Errorf("Load(big) = %v", err)
	}
}

// TestDocsExample parses every YAML block of docs/policy.md.
func TestDocsExample(t *testing.T) {
	// The headers example reads its credentials from these.
	t.Setenv("SHOP_TOKEN", "example-token")
	t.Setenv("SHOP_KEY", "example-key")
	md, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(md, -1)
	if len(blocks) == 0 {
		t.Fatal("no yaml blocks in docs/policy.md")
	}
	for i, b := range blocks {
		cfg := mustParse(t, b[1])
		if d, ok := cfg.Downstreams["shop"]; ok && d.Headers["Authorization"] != "Bearer example-token" {
			t.Errorf("the headers example: %d headers, Authorization not expanded", len(d.Headers))
		}
		if _, ok := cfg.Downstreams["hooks"]; ok {
			// A host or a path per tenant: what the text says of it.
			for url, want := range map[string]string{
				"https://acme.myshopify.com/admin/api/2024-01/orders.json": "shopify",
				"https://hooks.example.com/in/acme/orders":                 "hooks",
			} {
				if d, err := cfg.DownstreamForTenant("acme", url); err != nil || d.Name != want {
					t.Errorf("the {tenant} example: %s = %s, %v; want %s", url, d.Name, err, want)
				}
			}
			msg := regexp.MustCompile("(?s)```text\n(URL not allowed for the job's tenant: [^\n]*)\n```").FindSubmatch(md)
			_, err := cfg.DownstreamForTenant("acme", "https://bob.myshopify.com/admin/api/orders.json")
			if msg == nil || err == nil || err.Error() != string(msg[1]) {
				t.Errorf("the {tenant} example: bob's host from acme: %v; the text says %q", err, msg)
			}
		}
		if i != 0 {
			continue
		}
		// The complete example: spot-check what the text says of it.
		if !reflect.DeepEqual(cfg.Queue, Queue{Name: "default", Bound: 100000, TenantBound: 10000, Shards: 1, Prefetch: 64, MaxPayload: 1 << 20, Types: []string{"email.send", "sluice.http"}}) {
			t.Errorf("Queue = %+v", cfg.Queue)
		}
		s := cfg.Downstreams["shopify"]
		if !reflect.DeepEqual(s.Limit, throttle.Limit{Name: "shopify", Rate: 2, Per: time.Second, Burst: 40, MaxWait: 500 * time.Millisecond}) || !s.PerTenant || s.Concurrency.Max != 4 {
			t.Errorf("shopify = %+v", s)
		}
		if d, err := cfg.DownstreamForTenant("example", "https://example.myshopify.com/admin/api/2024-01/orders.json?limit=5"); err != nil || d.Name != "shopify" {
			t.Errorf("DownstreamFor(shopify order) = %v, %v", d.Name, err)
		}
		if d, err := cfg.DownstreamFor("https://hooks.partner.example:8443/in/42"); err != nil || d.Name != "webhooks" || d.Limit.MaxWait != throttle.NoWait {
			t.Errorf("DownstreamFor(webhook) = %+v, %v", d, err)
		}
		if p := cfg.Downstreams["payments"]; p.BaseURL != nil {
			t.Errorf("payments has a base URL: %v", p.BaseURL)
		}
		shop, _ := cfg.TenantPolicy("shop:1234")
		def, _ := cfg.TenantPolicy("someone")
		if shop.Weight != 3 || *shop.Policy != *def.Policy || def.ID != "default" {
			t.Errorf("shop:1234 = %+v, default = %+v", shop, def)
		}
		if b, ok := cfg.TenantPolicy("internal-batch"); !ok || b.Policy != nil || b.Weight != 5 {
			t.Errorf("internal-batch = %+v", b)
		}
		if n, ok := cfg.Tenants["20240101"]; !ok || n.Policy.Algorithm != algorithms.GCRA {
			t.Errorf("tenant 20240101 = %+v", n)
		}
	}

}

// TestAgreesWithQueue checks that the defaults shared with packages queue
// and throttle are theirs.
func TestAgreesWithQueue(t *testing.T) {
	cfg := mustParse(t, doc("queue: {bound: 1}", "downstreams:", "  s: {rate: 1, concurrency: 2}"))
	d := cfg.Downstreams["s"]
	if cfg.Queue.MaxPayload != queue.DefaultMaxPayload || d.Limit.MaxWait != throttle.DefaultMaxWait || d.Concurrency.Lease != throttle.DefaultLease {
		t.Errorf("max payload %d, max wait %v, lease %v: not the defaults of packages queue and throttle", cfg.Queue.MaxPayload, d.Limit.MaxWait, d.Concurrency.Lease)
	}
}

// TestDownstreamHeaders: a downstream's headers are read with each ${VAR}
// taken from the environment at load, names canonical; an unset or empty
// variable, a bad name or value, or a name given twice is an error with
// its line that names the header and the variable, never a value.
func TestDownstreamHeaders(t *testing.T) {
	const secret = "s3cret-token-value"
	t.Setenv("SLUICE_TEST_SHOP_TOKEN", secret)
	t.Setenv("SLUICE_TEST_EMPTY", "")
	t.Setenv("SLUICE_TEST_CRLF", "a\r\nX-Evil: 1")
	q := "queue: {bound: 1}"
	cfg := mustParse(t, doc(q, "downstreams:", "  s:", "    rate: 1",
		"    headers:",
		"      authorization: Bearer ${SLUICE_TEST_SHOP_TOKEN}",
		"      X-Plain: price $5 ${SLUICE_TEST_SHOP_TOKEN}${SLUICE_TEST_SHOP_TOKEN}"))
	want := map[string]string{"Authorization": "Bearer " + secret, "X-Plain": "price $5 " + secret + secret}
	if got := cfg.Downstreams["s"].Headers; !maps.Equal(got, want) {
		t.Fatalf("headers %q, want %q", got, want)
	}
	if h := mustParse(t, doc(q, "downstreams:", "  s: {rate: 1}")).Downstreams["s"].Headers; len(h) != 0 {
		t.Fatalf("no headers in the file: %q", h)
	}
	for _, tt := range []struct{ line, want string }{
		{"      Authorization: Bearer ${SLUICE_TEST_UNSET_VAR}", "line 6:22: downstreams.s.headers.Authorization: environment variable SLUICE_TEST_UNSET_VAR is not set"},
		{"      Authorization: Bearer ${SLUICE_TEST_EMPTY}", "line 6:22: downstreams.s.headers.Authorization: environment variable SLUICE_TEST_EMPTY is empty"},
		{"      Authorization: Bearer ${SLUICE_TEST_SHOP_TOKEN", "line 6:22: downstreams.s.headers.Authorization: a ${ without its closing }"},
		{"      Authorization: Bearer ${1BAD}", "line 6:22: downstreams.s.headers.Authorization: ${1BAD} is not an environment variable's name"},
		{"      X-Forward: ${SLUICE_TEST_CRLF}", "line 6:18: downstreams.s.headers.X-Forward: the value, once expanded, holds a control character other than tab"},
		{"      \"bad name\": x", "line 6:7: downstreams.s.headers[\"bad name\"]: a header name must be an HTTP token"},
		{"      Authorization: a\n      authorization: ${SLUICE_TEST_SHOP_TOKEN}", "downstreams.s.headers.authorization: the same header as downstreams.s.headers.Authorization"},
		{"      Authorization: [a, b]", "line 6:22: downstreams.s.headers.Authorization: must be a single value"},
	} {
		_, err := Parse(doc(q, "downstreams:", "  s:", "    rate: 1", "    headers:", tt.line))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v\nwant %s", tt.line, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "X-Evil")) {
			t.Errorf("%q: the error shows a variable's value: %v", tt.line, err)
		}
	}
}

// TestMaxWaitInTheFile: max_wait means what throttle.Limit.MaxWait means.
// Left out, the Limit has DefaultMaxWait (10s), which is also what Go's
// zero MaxWait means; none is throttle.NoWait; a duration is itself; a
// written 0s, which Go would read as the default and a reader might take
// for no wait, is refused.
func TestMaxWaitInTheFile(t *testing.T) {
	for _, c := range []struct {
		line string
		want time.Duration
	}{{"", throttle.DefaultMaxWait}, {"    max_wait: none", throttle.NoWait}, {"    max_wait: \" none \"", throttle.NoWait}, {"    max_wait: 2500ms", 2500 * time.Millisecond}, {"    max_wait: 24h", 24 * time.Hour}} {
		cfg := mustParse(t, doc("queue: {bound: 1}", "downstreams:", "  s:", "    rate: 1", c.line))
		lim := cfg.Downstreams["s"].Limit
		if lim.MaxWait != c.want {
			t.Errorf("%q: MaxWait = %v, want %v", c.line, lim.MaxWait, c.want)
		}
		if c.want == throttle.NoWait && lim.WaitLimit() != 0 || c.want == throttle.DefaultMaxWait && lim.WaitLimit() != 10*time.Second {
			t.Errorf("%q: WaitLimit = %v", c.line, lim.WaitLimit())
		}
	}
	if _, err := Parse(doc("queue: {bound: 1}", "downstreams:", "  s:", "    rate: 1", "    max_wait: 0s")); err == nil {
		t.Errorf("max_wait: 0s parsed; want it refused")
	}
}

// TestGuardInTheFile: guard is throttle.Limit.Guard. Left out or 0s, no
// guard (Go's zero); a duration is itself; a negative one is refused.
func TestGuardInTheFile(t *testing.T) {
	for _, c := range []struct {
		line string
		want time.Duration
	}{{"", 0}, {"    guard: 0s", 0}, {"    guard: 50ms", 50 * time.Millisecond}} {
		cfg := mustParse(t, doc("queue: {bound: 1}", "downstreams:", "  s:", "    rate: 10", "    burst: 5", c.line))
		if got := cfg.Downstreams["s"].Limit.Guard; got != c.want {
			t.Errorf("%q: Guard = %v, want %v", c.line, got, c.want)
		}
	}
	_, err := Parse(doc("queue: {bound: 1}", "downstreams:", "  s:", "    rate: 1", "    guard: -1s"))
	if err == nil || !strings.Contains(err.Error(), "downstreams.s.guard: must not be negative, got -1s") {
		t.Errorf("guard: -1s: %v; want it refused", err)
	}
}

// TestQueueReplicas: queue.replicas and queue.replica_timeout reach
// queue.Config; out of range is an error naming the field.
func TestQueueReplicas(t *testing.T) {
	c, err := Parse([]byte("queue:\n  bound: 10\n  replicas: 1\n  replica_timeout: 250ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if qc := c.QueueConfig(); qc.Replicas != 1 || qc.ReplicaTimeout != 250*time.Millisecond {
		t.Errorf("QueueConfig: replicas %d, timeout %v", qc.Replicas, qc.ReplicaTimeout)
	}
	for _, bad := range []string{"replicas: -1", "replicas: 17", "replica_timeout: 0s", "replica_timeout: 2m"} {
		_, err := Parse([]byte("queue:\n  bound: 10\n  " + bad + "\n"))
		field, _, _ := strings.Cut(bad, ":")
		if err == nil || !strings.Contains(err.Error(), "queue."+field) {
			t.Errorf("%s: %v, want an error naming queue.%s", bad, err, field)
		}
	}
}

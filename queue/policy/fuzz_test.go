package policy

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	typeRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,256}$`)
)

// checkInvariants checks, independently of the parser, what every Config
// returned by Parse promises.
func checkInvariants(c *Config) error {
	if c == nil {
		return errors.New("nil Config")
	}
	if c.Downstreams == nil || c.Tenants == nil {
		return errors.New("nil map")
	}
	q := c.Queue
	switch {
	case !nameRE.MatchString(q.Name):
		return fmt.Errorf("queue name %q", q.Name)
	case q.Bound < 1 || q.Bound > MaxBound:
		return fmt.Errorf("bound %d", q.Bound)
	case q.TenantBound < 0 || q.TenantBound > q.Bound:
		return fmt.Errorf("tenant bound %d of %d", q.TenantBound, q.Bound)
	case q.Prefetch < 1 || q.Prefetch > 1_000_000:
		return fmt.Errorf("prefetch %d", q.Prefetch)
	case q.MaxPayload < 1 || q.MaxPayload > 64<<20:
		return fmt.Errorf("max payload %d", q.MaxPayload)
	case q.Types != nil && (!slices.Contains(q.Types, "sluice.http") || len(q.Types) > MaxTypes+1):
		return fmt.Errorf("types %q", q.Types)
	}
	for i, typ := range q.Types {
		if !typeRE.MatchString(typ) || slices.Contains(q.Types[:i], typ) {
			return fmt.Errorf("type %q in %q", typ, q.Types)
		}
	}
	for name, d := range c.Downstreams {
		l := d.Limit
		switch {
		case !nameRE.MatchString(name) || d.Name != name || l.Name != name:
			return fmt.Errorf("downstream %q named %q, limit %q", name, d.Name, l.Name)
		case l.Rate < 1 || l.Burst < 1 || l.Per <= 0:
			return fmt.Errorf("downstream %s: limit %+v", name, l)
		case l.MaxWait == 0 || l.MaxWait > MaxDuration:
			return fmt.Errorf("downstream %s: max wait %v", name, l.MaxWait)
		case d.Timeout < time.Millisecond || d.Timeout > MaxDuration:
			return fmt.Errorf("downstream %s: timeout %v", name, d.Timeout)
		}
		if err := (algorithms.Policy{Algorithm: algorithms.GCRA, Limit: l.Rate, Period: l.Per, Burst: l.Burst}).Validate(); err != nil {
			return fmt.Errorf("downstream %s: %v", name, err)
		}
		if len(l.Also) > throttle.MaxAlso || l.Also != nil && len(l.Also) == 0 {
			return fmt.Errorf("downstream %s: also %+v", name, l.Also)
		}
		for i, r := range l.Also {
			if r.Counts != throttle.CountsCost && r.Counts != throttle.CountsCalls {
				return fmt.Errorf("downstream %s: also[%d] counts %v", name, i, r.Counts)
			}
			if err := (algorithms.Policy{Algorithm: algorithms.GCRA, Limit: r.Rate, Period: r.Per, Burst: r.Burst}).Validate(); err != nil {
				return fmt.Errorf("downstream %s: also[%d]: %v", name, i, err)
			}
		}
		if cc := d.Concurrency; cc != nil {
			if cc.Name != name || cc.Max < 1 || cc.Max > 1_000_000 || cc.Lease < time.Millisecond || cc.Lease > MaxDuration {
				return fmt.Errorf("downstream %s: concurrency %+v", name, cc)
			}
		}
		if u := d.BaseURL; u != nil {
			if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
				return fmt.Errorf("downstream %s: base URL %v", name, u)
			}
			got, err := c.DownstreamForTenant("t0", fillTenant(u, "t0"))
			if err != nil || got.Name != name {
				return fmt.Errorf("downstream %s: its own base URL %v goes to %q, %v", name, u, got.Name, err)
			}
		}
	}
	for id, tn := range c.Tenants {
		switch {
		case id == "" || len(id) > queue.MaxTenantLen || tn.ID != id:
			return fmt.Errorf("tenant %.20q has id %.20q", id, tn.ID)
		case tn.Weight < 1 || tn.Weight > 100:
			return fmt.Errorf("tenant %.20q: weight %d", id, tn.Weight)
		}
		if tn.Policy != nil {
			if err := tn.Policy.Validate(); err != nil {
				return fmt.Errorf("tenant %.20q: %v", id, err)
			}
		}
	}
	for i, s := range c.Schedules {
		switch {
		case !nameRE.MatchString(s.Name) || slices.ContainsFunc(c.Schedules[:i], func(o Schedule) bool { return o.Name == s.Name }):
			return fmt.Errorf("schedule %q", s.Name)
		case (s.Cron == "") == (s.Every == 0) || s.Every < 0 || s.Every%time.Second != 0:
			return fmt.Errorf("schedule %s: cron %q, every %v", s.Name, s.Cron, s.Every)
		case s.CatchUp < time.Second || s.CatchUp > MaxDuration:
			return fmt.Errorf("schedule %s: catch_up %v", s.Name, s.CatchUp)
		case s.Next(time.Now()).IsZero():
			return fmt.Errorf("schedule %s: no next tick", s.Name)
		}
		if err := c.CheckJob(&s.Job); err != nil || s.Job.Tenant == "" {
			return fmt.Errorf("schedule %s: job %+v: %v", s.Name, s.Job, err)
		}
	}
	return nil
}

// FuzzParse checks that Parse never panics, that a failure is a non-empty
// ErrorList that places every problem in the file, and that a success
// keeps every invariant and is the same on a second parse.
func FuzzParse(f *testing.F) {
	f.Add([]byte("queue: {bound: 1}\n"))
	f.Add([]byte("queue:\n  bound: 5\ndownstreams:\n  a: {rate: 1, base_url: http://a.com/api}\ntenants:\n  default: {algorithm: gcra, limit: 1, period: 1s}\n"))
	f.Add([]byte("queue: {bound: 1}\ndownstreams:\n  s: {rate: 1, base_url: \"https://{tenant}.myshopify.com/admin/\"}\n  h: {rate: 1, base_url: \"https://hooks.example.com/in/{tenant}/\"}\n"))
	f.Add([]byte("queue: {bound: 1}\ndownstreams:\n  a:\n    rate: 10\n    also:\n      - {rate: 1000, per: 1h, burst: 50}\n      - {rate: 5, counts: calls}\n"))
	f.Add([]byte("queue: {bound: 1, types: [r]}\ndownstreams:\n  a: {rate: 2, base_url: http://a.com/api}\nschedules:\n  n: {cron: \"0 3 * * 1-5\", tenant: t, catch_up: 1h, job: {type: sluice.http, downstream: a, payload: {url: http://a.com/api/x}}}\n  e: {every: 10m, tenant: t, job: {type: r, payload: [1, {a: b}], cost: 1}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Config and error: %v", err)
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 || len(list) > MaxErrors+1 {
				t.Fatalf("error %T with %d problems: %v", err, len(list), err)
			}
			// YAML breaks lines at \n, \r, \r\n, NEL, LS and PS; counting
			// each of them is an upper bound.
			lines := 2
			for _, sep := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
				lines += bytes.Count(data, []byte(sep))
			}
			for i, e := range list {
				if e.Msg == "" {
					t.Fatalf("problem %d has no message: %+v", i, e)
				}
				if i < MaxErrors && (e.Line < 1 || e.Line > lines) {
					t.Fatalf("problem %d at line %d of a %d-line file: %v", i, e.Line, lines, e)
				}
			}
			return
		}
		if err := checkInvariants(cfg); err != nil {
			t.Fatalf("invariant broken: %v\n--- file:\n%s", err, data)
		}
		again, err := Parse(data)
		if err != nil || !reflect.DeepEqual(cfg, again) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

// FuzzDownstreamForTenant checks that a {tenant} base_url never gives a
// tenant another's host or path: whatever the tenant and the URL, a URL
// resolved to such a downstream is on the host, or under the path, that
// the base_url gives that very tenant.
func FuzzDownstreamForTenant(f *testing.F) {
	cfg, err := Parse([]byte("queue: {bound: 1}\ndownstreams:\n" +
		"  s: {rate: 1, base_url: \"https://{tenant}.myshopify.com/admin/\"}\n" +
		"  h: {rate: 1, base_url: \"https://hooks.example.com/in/{tenant}/v1\"}\n" +
		"  r: {rate: 1, base_url: \"http://r.example.com/{tenant}\"}\n" +
		"  p: {rate: 1, base_url: \"https://hooks.example.com/status/\"}\n"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("acme", "https://acme.myshopify.com/admin/x")
	f.Add("acme", "https://bob.myshopify.com/admin/x")
	f.Add("a.b", "https://hooks.example.com/in/a.b/v1/x")
	f.Add("..", "https://hooks.example.com/in/../v1")
	f.Add("ACME", "http://r.example.com/acme/x")
	f.Fuzz(func(t *testing.T, tenant, raw string) {
		d, err := cfg.DownstreamForTenant(tenant, raw)
		if err != nil || d.Name == "p" {
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			t.Fatalf("%q resolved to %s but does not parse: %v", raw, d.Name, perr)
		}
		own, _ := url.Parse(fillTenant(d.BaseURL, tenant))
		host, path := strings.ToLower(u.Host), u.EscapedPath()
		if port := u.Port(); port == "443" && u.Scheme == "https" || port == "80" && u.Scheme == "http" || port == "" {
			host = strings.ToLower(u.Hostname())
		}
		if host != own.Host || path != own.Path && !strings.HasPrefix(path, strings.TrimSuffix(own.Path, "/")+"/") {
			t.Fatalf("tenant %q reached %s (%s%s) through %s, whose base_url gives it %s", tenant, raw, host, path, d.Name, own)
		}
	})
}

package policy

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/throttle"
)

// The checks of a decoded file. Each value is checked where it is read, at
// its field path; a problem is reported at the value, or at the key of
// the entry it belongs to when the file leaves the value out.

// value reports why the value at path cannot be used, if it cannot; false
// also when the file has none.
func (p *parser) value(path string, l *leaf) bool {
	if l.bad != "" {
		p.add(l.at, path, nil, "%s", l.bad)
	}
	return l.set && l.bad == ""
}

func (p *parser) text(path string, v *text) (string, bool) {
	return v.v, p.value(path, &v.leaf)
}

func (p *parser) integer(path string, v *integer, lo, hi int64) (int64, bool) {
	switch {
	case !p.value(path, &v.leaf):
	case v.v < lo:
		p.add(v.at, path, nil, "must be at least %d, got %d", lo, v.v)
	case v.v > hi:
		p.add(v.at, path, nil, "must be at most %d, got %d", hi, v.v)
	default:
		return v.v, true
	}
	return 0, false
}

func (p *parser) duration(path string, v *duration, lo, hi time.Duration) (time.Duration, bool) {
	switch {
	case !p.value(path, &v.leaf):
	case v.v < lo || v.v > hi:
		p.add(v.at, path, nil, "must be between %s and %s, got %s", lo, hi, v.v)
	default:
		return v.v, true
	}
	return 0, false
}

func (p *parser) size(path string, v *size, lo, hi int64) (int64, bool) {
	switch {
	case !p.value(path, &v.leaf):
	case v.v < lo:
		p.add(v.at, path, nil, "must be at least %s, got %s", formatSize(lo), v.text)
	case v.v > hi:
		p.add(v.at, path, nil, "must be at most %s, got %s", formatSize(hi), v.text)
	default:
		return v.v, true
	}
	return 0, false
}

func formatSize(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// policy reports err, from algorithms.Policy.Validate of the entry at
// path, at the value of the field it names (fields maps a Policy field to
// the file's key and value), or else at the entry's key.
func (p *parser) policy(err error, path string, fields map[string]policyField) {
	field, msg, at := path, err.Error(), p.keys[path].key
	var fe *algorithms.FieldError
	if errors.As(err, &fe) {
		msg = fe.Msg
		if f, ok := fields[fe.Field]; ok {
			field = path + "." + f.key
			if f.val.set {
				at = f.val.at
			}
		}
	}
	p.add(at, field, err, "%s", msg)
}

// policyField is the key and value in the file of a Policy field.
type policyField struct {
	key string
	val *leaf
}

func (p *parser) config(f *file) *Config {
	cfg := &Config{Queue: p.queue(&f.Queue), Downstreams: map[string]Downstream{}, Tenants: map[string]Tenant{}}
	bases := map[string]string{} // normalised base URL -> the downstream that has it
	for _, ent := range f.Downstreams {
		path := join("downstreams", ent.name)
		if !names.Valid(ent.name, MaxNameLen, "") {
			p.add(p.keys[path].key, path, nil, "a downstream's name must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -", MaxNameLen)
			continue
		}
		d, ok := p.downstream(&ent.val, ent.name, path)
		if !ok {
			continue
		}
		if d.BaseURL != nil {
			b := originOf(d.BaseURL) + basePath(d.BaseURL)
			if prev, dup := bases[b]; dup {
				p.add(ent.val.BaseURL.at, path+".base_url", nil, "the same base_url as downstreams.%s (line %d); a URL must belong to one downstream",
					prev, p.keys[join("downstreams", prev)].key.line)
				continue
			}
			bases[b] = ent.name
		}
		cfg.Downstreams[ent.name] = d
	}
	for _, ent := range f.Tenants {
		path := join("tenants", ent.name)
		switch {
		case ent.name == "":
			p.add(p.keys[path].key, path, nil, "a tenant id must not be empty")
		case len(ent.name) > MaxTenantIDLen:
			p.add(p.keys[path].key, path, nil, "a tenant id must be at most %d bytes, got %d", MaxTenantIDLen, len(ent.name))
		default:
			if t, ok := p.tenant(&ent.val, ent.name, path); ok {
				cfg.Tenants[ent.name] = t
			}
		}
	}
	return cfg
}

func (p *parser) queue(qf *queueFile) Queue {
	q := Queue{Name: DefaultQueueName, Prefetch: DefaultPrefetch, MaxPayload: DefaultMaxPayload, Retention: DefaultRetention}
	key, ok := p.keys["queue"]
	switch {
	case !ok:
		p.add(p.keys[""].key, "queue.bound", nil, "required; the file has no queue section")
		return q
	case key.bad:
		return q
	}
	if v, ok := p.text("queue.name", &qf.Name); ok {
		if names.Valid(v, MaxNameLen, "") {
			q.Name = v
		} else {
			p.add(qf.Name.at, "queue.name", nil, "must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -, got %s", MaxNameLen, qf.Name.desc)
		}
	}
	var boundOK, tenantBoundOK bool
	q.Bound, boundOK = p.integer("queue.bound", &qf.Bound, 1, MaxBound)
	q.TenantBound, tenantBoundOK = p.integer("queue.tenant_bound", &qf.TenantBound, 0, MaxBound)
	if v, ok := p.integer("queue.prefetch", &qf.Prefetch, 1, MaxPrefetch); ok {
		q.Prefetch = int(v)
	}
	if v, ok := p.size("queue.max_payload", &qf.MaxPayload, 1, MaxPayloadLimit); ok {
		q.MaxPayload = v
	}
	if v, ok := p.duration("queue.retention", &qf.Retention, MinRetention, MaxRetention); ok {
		q.Retention = v
	}
	if !p.has("queue.bound") {
		p.add(key.key, "queue.bound", nil, "required: the most jobs waiting, at least 1")
	}
	if boundOK && tenantBoundOK && q.TenantBound > q.Bound { // an absent tenant_bound is 0
		p.add(qf.TenantBound.at, "queue.tenant_bound", nil, "must be at most queue.bound (%d), got %d", q.Bound, q.TenantBound)
	}
	return q
}

func (p *parser) downstream(df *downstreamFile, name, path string) (Downstream, bool) {
	if p.keys[path].bad {
		return Downstream{}, false
	}
	before := len(p.errs)
	d := Downstream{
		Name:    name,
		Limit:   throttle.Limit{Name: name, Per: DefaultPer, Burst: DefaultBurst, MaxWait: DefaultMaxWait},
		Timeout: DefaultTimeout,
	}
	if v, ok := p.text(path+".base_url", &df.BaseURL); ok {
		u, err := parseBaseURL(v)
		if err != nil {
			p.add(df.BaseURL.at, path+".base_url", nil, "%v", err)
		}
		d.BaseURL = u
	}
	d.Limit.Rate, d.Limit.Per, d.Limit.Burst = p.pace(path, &df.Rate, &df.Per, &df.Burst)
	if len(df.Also) > throttle.MaxAlso {
		p.add(p.keys[path+".also"].val, path+".also", nil, "may list at most %d rates, got %d", throttle.MaxAlso, len(df.Also))
	} else {
		d.Limit.Also = p.also(df.Also, path+".also")
	}
	if w, ok := p.duration(path+".max_wait", &df.MaxWait, 0, MaxDuration); ok {
		d.Limit.MaxWait = w
		if w == 0 {
			d.Limit.MaxWait = -1 // only a slot due now
		}
	}
	conc, _ := p.integer(path+".concurrency", &df.Concurrency, 0, MaxConcurrency)
	lease := DefaultLease
	if l, ok := p.duration(path+".lease", &df.Lease, time.Millisecond, MaxDuration); ok {
		lease = l
	}
	if p.value(path+".per_tenant", &df.PerTenant.leaf) {
		d.PerTenant = df.PerTenant.v
	}
	if t, ok := p.duration(path+".timeout", &df.Timeout, time.Millisecond, MaxDuration); ok {
		d.Timeout = t
	}
	if p.has(path + ".headers") {
		d.Headers = p.headers(df.Headers, path+".headers")
	}
	if !p.has(path + ".rate") {
		p.add(p.keys[path].key, path+".rate", nil, "required: the units allowed per `per`, at least 1")
	}
	if len(p.errs) > before || p.keys[path].flawed || !p.paceValid(path, d.Limit.Rate, d.Limit.Per, d.Limit.Burst, &df.Rate, &df.Per, &df.Burst) {
		return d, false
	}
	if conc > 0 {
		d.Concurrency = &throttle.Concurrency{Name: name, Max: conc, Lease: lease}
	}
	return d, true
}

// headers checks a downstream's headers: names that are HTTP tokens, given
// once whatever their case, and values, once each ${VAR} in them is
// replaced by the environment variable's value, without control
// characters but tab. Messages name the header and the variable, never a
// value. The names are returned canonical (http.CanonicalHeaderKey).
func (p *parser) headers(e entries[text], path string) map[string]string {
	out := make(map[string]string, len(e))
	seen := map[string]string{} // canonical name -> the name as written
	for _, ent := range e {
		field := join(path, ent.name)
		v, ok := p.text(field, &ent.val)
		if !ok {
			continue
		}
		if downstream.CheckRequest("", map[string]string{ent.name: ""}) != nil {
			p.add(p.keys[field].key, field, nil, "a header name must be an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)")
			continue
		}
		name := http.CanonicalHeaderKey(ent.name)
		if prev, dup := seen[name]; dup {
			p.add(p.keys[field].key, field, nil, "the same header as %s (names are not case-sensitive)", join(path, prev))
			continue
		}
		seen[name] = ent.name
		val, err := expandEnv(v)
		if err != nil {
			p.add(ent.val.at, field, nil, "%v", err)
			continue
		}
		if downstream.CheckRequest("", map[string]string{name: val}) != nil {
			p.add(ent.val.at, field, nil, "the value, once expanded, holds a control character other than tab")
			continue
		}
		out[name] = val
	}
	return out
}

// expandEnv replaces each ${NAME} in s by the value of the environment
// variable NAME, which must be set and not empty. A "$" not followed by
// "{" is kept as it is. Errors name the variable, never a value.
func expandEnv(s string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", errors.New("a ${ without its closing }")
		}
		name := s[i+2 : i+end]
		if name == "" || name[0] >= '0' && name[0] <= '9' || strings.TrimLeft(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return "", fmt.Errorf("${%.64s} is not an environment variable's name (letters, digits and _, not starting with a digit)", name)
		}
		val, ok := os.LookupEnv(name)
		switch {
		case !ok:
			return "", fmt.Errorf("environment variable %s is not set", name)
		case val == "":
			return "", fmt.Errorf("environment variable %s is empty", name)
		}
		b.WriteString(val)
		s = s[i+end+1:]
	}
}

// pace reads the rate, per and burst of a downstream or of one of its
// also rates, at path, each defaulted when absent or unusable.
func (p *parser) pace(path string, rate *integer, per *duration, burst *integer) (int64, time.Duration, int64) {
	r, _ := p.integer(path+".rate", rate, 1, algorithms.MaxLimit)
	pd, b := DefaultPer, int64(DefaultBurst)
	if v, ok := p.duration(path+".per", per, algorithms.MinPeriod, algorithms.MaxPeriod); ok {
		if v%time.Microsecond != 0 {
			p.add(per.at, path+".per", nil, "must be a whole number of microseconds, got %s", v)
		}
		pd = v
	}
	if v, ok := p.integer(path+".burst", burst, 1, algorithms.MaxLimit); ok {
		b = v
	}
	return r, pd, b
}

// paceValid reports whether a rate, per and burst that are each fine are
// fine together: the throttle checks them as a GCRA policy, which may
// find them too fine-grained to count exactly.
func (p *parser) paceValid(path string, rate int64, per time.Duration, burst int64, rf *integer, pf *duration, bf *integer) bool {
	pol := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: rate, Period: per, Burst: burst}
	if err := pol.Validate(); err != nil {
		p.policy(err, path, map[string]policyField{
			"limit": {"rate", &rf.leaf}, "period": {"per", &pf.leaf}, "burst": {"burst", &bf.leaf},
		})
		return false
	}
	return true
}

// also checks a downstream's also list, its items under path.
func (p *parser) also(items []rateFile, path string) []throttle.Rate {
	var out []throttle.Rate
	for i := range items {
		if r, ok := p.rate(&items[i], fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, r)
		}
	}
	return out
}

// rate checks one item of an also list.
func (p *parser) rate(rf *rateFile, path string) (throttle.Rate, bool) {
	if p.keys[path].bad {
		return throttle.Rate{}, false
	}
	before := len(p.errs)
	var r throttle.Rate
	r.Rate, r.Per, r.Burst = p.pace(path, &rf.Rate, &rf.Per, &rf.Burst)
	if v, ok := p.text(path+".counts", &rf.Counts); ok && v == "calls" {
		r.Counts = throttle.CountsCalls
	} else if ok && v != "cost" {
		p.add(rf.Counts.at, path+".counts", nil, "must be cost (the call's cost, the default) or calls (1 a call), got %s", rf.Counts.desc)
	}
	if !p.has(path + ".rate") {
		p.add(p.keys[path].key, path+".rate", nil, "required: the units allowed per `per`, at least 1")
	}
	if len(p.errs) > before || p.keys[path].flawed {
		return r, false
	}
	return r, p.paceValid(path, r.Rate, r.Per, r.Burst, &rf.Rate, &rf.Per, &rf.Burst)
}

func (p *parser) tenant(tf *tenantFile, id, path string) (Tenant, bool) {
	t := Tenant{ID: id, Weight: DefaultWeight}
	if p.keys[path].bad {
		return t, false
	}
	before := len(p.errs)
	alg, _ := p.text(path+".algorithm", &tf.Algorithm)
	pol := algorithms.Policy{Algorithm: algorithms.Algorithm(alg)}
	pol.Limit, _ = p.integer(path+".limit", &tf.Limit, math.MinInt64, math.MaxInt64)
	pol.Period, _ = p.duration(path+".period", &tf.Period, 0, math.MaxInt64)
	pol.Burst, _ = p.integer(path+".burst", &tf.Burst, math.MinInt64, math.MaxInt64)
	if w, ok := p.integer(path+".weight", &tf.Weight, 1, MaxWeight); ok {
		t.Weight = int(w)
	}
	if class, ok := p.text(path+".class", &tf.Class); ok {
		if names.Valid(class, 32, "") {
			t.Class = class
		} else {
			p.add(tf.Class.at, path+".class", nil, "use 1 to 32 bytes of [A-Za-z0-9_.-], got %q", limitLen(class, 40))
		}
	}
	if len(p.errs) > before || p.keys[path].flawed {
		return t, false
	}
	if !p.has(path+".algorithm") && !p.has(path+".limit") && !p.has(path+".period") && !p.has(path+".burst") {
		return t, true // no admission policy
	}
	if err := pol.Validate(); err != nil {
		p.policy(err, path, map[string]policyField{
			"algorithm": {"algorithm", &tf.Algorithm.leaf}, "limit": {"limit", &tf.Limit.leaf},
			"period": {"period", &tf.Period.leaf}, "burst": {"burst", &tf.Burst.leaf},
		})
		return t, false
	}
	t.Policy = &pol
	return t, true
}

package policy

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/text/unicode/norm"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/throttle"
)

// The checks of a decoded file. Each reports a problem at the value it
// concerns, or at the key of its entry when the file leaves the value out,
// finding both by field path.

// has reports whether the file has a key at path, usable or not.
func (p *parser) has(path string) bool {
	_, ok := p.keys[path]
	return ok
}

// value returns the value at path, or nil when the file has none or it
// cannot be used.
func (p *parser) value(path string) *yaml.Node {
	if pl := p.keys[path]; !pl.bad {
		return pl.val
	}
	return nil
}

// inRange reports whether the file has a usable value at path, v, and
// whether it is from lo to hi.
func inRange[T int64 | time.Duration | byteSize](p *parser, path string, v, lo, hi T) bool {
	n := p.value(path)
	switch {
	case n == nil:
		return false
	case v >= lo && v <= hi:
		return true
	case reflect.TypeFor[T]() == durationType:
		p.add(n, path, nil, "must be between %v and %v, got %v", lo, hi, v)
	case v < lo:
		p.add(n, path, nil, "must be at least %v, got %s", lo, n.Value)
	default:
		p.add(n, path, nil, "must be at most %v, got %s", hi, n.Value)
	}
	return false
}

// policy reports err, from algorithms.Policy.Validate of the entry at
// path, at the value of the field that it names (keys maps the Policy's
// fields to the file's, when they differ), or else at the entry's key.
func (p *parser) policy(err error, path string, keys map[string]string) {
	field, msg, at := path, err.Error(), p.keys[path].key
	var fe *algorithms.FieldError
	if errors.As(err, &fe) && fe.Field != "" {
		field, msg = path+"."+cmp.Or(keys[fe.Field], fe.Field), fe.Msg
		if n := p.value(field); n != nil {
			at = n
		}
	}
	p.add(at, field, err, "%s", msg)
}

func (p *parser) config(f *file) *Config {
	cfg := &Config{Queue: p.queue(&f.Queue), Downstreams: map[string]queue.Downstream{}, Tenants: map[string]Tenant{}}
	bases := map[string]string{} // normalised base URL -> the downstream that has it
	var order []string           // the downstreams, as in the file
	for _, ent := range f.Downstreams {
		path := join("downstreams", ent.name)
		if !names.Valid(ent.name, names.MaxLen, "") {
			p.add(p.keys[path].key, path, nil, "a downstream's name must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -", names.MaxLen)
			continue
		}
		d := p.downstream(&ent.val, ent.name, path)
		if d.BaseURL != nil {
			b := originOf(d.BaseURL) + basePath(d.BaseURL)
			if prev, dup := bases[b]; dup {
				p.add(p.value(path+".base_url"), path+".base_url", nil, "the same base_url as downstreams.%s (line %d); a URL must belong to one downstream",
					prev, p.keys[join("downstreams", prev)].key.Line)
				continue
			}
			bases[b] = ent.name
		}
		cfg.Downstreams[ent.name] = d
		order = append(order, ent.name)
	}
	ref := func(name string) string {
		return fmt.Sprintf("%s's base_url (line %d)", join("downstreams", name), p.keys[join("downstreams", name)].key.Line)
	}
	for _, o := range tenantOverlaps(order, cfg.Downstreams, ref) {
		path := join("downstreams", o.a) + ".base_url"
		p.add(p.value(path), path, nil, "%s", o.why)
	}
	cfg.index = indexBaseURLs(cfg.Downstreams)
	if cfg.Queue.Types != nil {
		cfg.types = map[string]bool{}
		for _, t := range cfg.Queue.Types {
			cfg.types[t] = true
		}
	}
	for _, ent := range f.Tenants {
		path := join("tenants", ent.name)
		switch {
		case ent.name == "":
			p.add(p.keys[path].key, path, nil, "a tenant id must not be empty")
		case len(ent.name) > queue.MaxTenantLen:
			p.add(p.keys[path].key, path, nil, "a tenant id must be at most %d bytes, got %d", queue.MaxTenantLen, len(ent.name))
		case !norm.NFC.IsNormalString(ent.name):
			// Jobs must name their tenant in NFC (queue.Job.Tenant): an
			// entry spelt otherwise would never apply.
			p.add(p.keys[path].key, path, nil, "a tenant id must be in Unicode normalization form C (NFC), as jobs name it: write %+q", norm.NFC.String(ent.name))
		default:
			cfg.Tenants[ent.name] = p.tenant(&ent.val, ent.name, path)
		}
	}
	cfg.Schedules = p.schedules(f.Schedules, cfg)
	return cfg
}

// queue checks the queue section. A value that a check refuses may be in
// what it returns, as from downstream, pace and tenant: a problem found
// makes decode return no Config. Where a default is not zero, the checks
// refuse zero, so cmp.Or tells a value given from one left out.
func (p *parser) queue(qf *queueFile) Queue {
	switch key, ok := p.keys["queue"]; {
	case !ok:
		p.add(p.keys[""].key, "queue.bound", nil, "required; the file has no queue section")
	case !key.bad && !p.has("queue.bound"):
		p.add(key.key, "queue.bound", nil, "required: the most jobs waiting, at least 1")
	}
	if n := p.value("queue.name"); n != nil && !names.Valid(qf.Name, names.MaxLen, "") {
		p.add(n, "queue.name", nil, "must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -, got %s", names.MaxLen, describe(n))
	}
	boundOK := inRange(p, "queue.bound", qf.Bound, 1, MaxBound)
	if inRange(p, "queue.tenant_bound", qf.TenantBound, 0, MaxBound) && boundOK && qf.TenantBound > qf.Bound {
		p.add(p.value("queue.tenant_bound"), "queue.tenant_bound", nil, "must be at most queue.bound (%d), got %d", qf.Bound, qf.TenantBound)
	}
	if inRange(p, "queue.shards", qf.Shards, 1, queue.MaxShards) && boundOK && qf.Shards > qf.Bound {
		p.add(p.value("queue.shards"), "queue.shards", nil, "must be at most queue.bound (%d): each shard holds a share of it, got %d", qf.Bound, qf.Shards)
	}
	inRange(p, "queue.prefetch", qf.Prefetch, 1, 1_000_000)
	inRange(p, "queue.max_payload", qf.MaxPayload, 1, 64<<20)
	inRange(p, "queue.retention", qf.Retention, 0, 30*24*time.Hour)
	inRange(p, "queue.replicas", qf.Replicas, 0, 16)
	inRange(p, "queue.replica_timeout", qf.ReplicaTimeout, time.Millisecond, time.Minute)
	return Queue{Replicas: int(qf.Replicas), ReplicaTimeout: qf.ReplicaTimeout, Name: cmp.Or(qf.Name, "default"), Bound: qf.Bound, TenantBound: qf.TenantBound, Shards: int(cmp.Or(qf.Shards, 1)), Prefetch: int(cmp.Or(qf.Prefetch, 64)),
		MaxPayload: int64(cmp.Or(qf.MaxPayload, queue.DefaultMaxPayload)), Retention: qf.Retention, Types: p.types(qf.Types)}
}

// types checks queue.types and returns the list with the built-in
// httpjob.Type added when the file does not name it; nil when the file
// has no usable list.
func (p *parser) types(list []string) []string {
	const path = "queue.types"
	if p.value(path) == nil {
		return nil
	}
	if len(list) > MaxTypes {
		p.add(p.value(path), path, nil, "may list at most %d job types, got %d", MaxTypes, len(list))
		return nil
	}
	out := make([]string, 0, len(list)+1)
	seen := map[string]int{}
	for i, t := range list {
		item := fmt.Sprintf("%s[%d]", path, i)
		n := p.value(item)
		switch first, dup := seen[t]; {
		case n == nil:
		case !names.Valid(t, queue.MaxTypeLen, ":/"):
			p.add(n, item, nil, "a job type is 1 to %d characters of A-Z, a-z, 0-9, _, ., :, / and -, got %s", queue.MaxTypeLen, describe(n))
		case dup:
			p.add(n, item, nil, "%q is listed twice (first as %s[%d])", t, path, first)
		default:
			seen[t] = i
			out = append(out, t)
		}
	}
	if _, ok := seen[httpjob.Type]; !ok {
		out = append(out, httpjob.Type)
	}
	return out
}

func (p *parser) downstream(df *downstreamFile, name, path string) queue.Downstream {
	if p.keys[path].bad {
		return queue.Downstream{}
	}
	d := queue.Downstream{Name: name, Limit: p.pace(path, df.Rate, df.Per, df.Burst), Timeout: cmp.Or(df.Timeout, 30*time.Second), PerTenant: df.PerTenant}
	d.Limit.Name, d.Limit.MaxWait = name, throttle.DefaultMaxWait
	if n := p.value(path + ".base_url"); n != nil {
		u, err := parseBaseURL(df.BaseURL)
		if err != nil {
			p.add(n, path+".base_url", nil, "%v", err)
		}
		d.BaseURL = u
	}
	if len(df.Also) > throttle.MaxAlso {
		p.add(p.value(path+".also"), path+".also", nil, "may list at most %d rates, got %d", throttle.MaxAlso, len(df.Also))
		df.Also = nil
	}
	for i, r := range df.Also {
		item := fmt.Sprintf("%s.also[%d]", path, i)
		if p.keys[item].bad {
			continue
		}
		l := p.pace(item, r.Rate, r.Per, r.Burst)
		rate := throttle.Rate{Rate: l.Rate, Per: l.Per, Burst: l.Burst}
		if n := p.value(item + ".counts"); n != nil && r.Counts == "calls" {
			rate.Counts = throttle.CountsCalls
		} else if n != nil && r.Counts != "cost" {
			p.add(n, item+".counts", nil, "must be cost (the call's cost, the default) or calls (1 a call), got %s", describe(n))
		}
		d.Limit.Also = append(d.Limit.Also, rate)
	}
	// max_wait means what Limit.MaxWait means, but for 0s: Go's zero is
	// "unset, the default", which a file says by leaving the key out; a
	// written 0s is refused rather than read as either 10s or no wait.
	if n := p.value(path + ".max_wait"); n != nil && df.MaxWait < 0 {
		d.Limit.MaxWait = throttle.NoWait
	} else if n != nil && (df.MaxWait < waitDuration(time.Millisecond) || df.MaxWait > waitDuration(MaxDuration)) {
		p.add(n, path+".max_wait", nil, "must be between 1ms and %v, or none for only a slot due now (leave it out for the default %v), got %v",
			MaxDuration, throttle.DefaultMaxWait, time.Duration(df.MaxWait))
	} else if n != nil {
		d.Limit.MaxWait = time.Duration(df.MaxWait)
	}
	// guard: absent or 0s for none.
	if inRange(p, path+".guard", df.Guard, 0, MaxDuration) {
		d.Limit.Guard = df.Guard
	}
	inRange(p, path+".concurrency", df.Concurrency, 0, 1_000_000)
	inRange(p, path+".lease", df.Lease, throttle.MinLease, MaxDuration)
	inRange(p, path+".timeout", df.Timeout, time.Millisecond, MaxDuration)
	if inRange(p, path+".max_refusals", df.MaxRefusals, 1, 1_000_000) {
		d.MaxRefusals = int(df.MaxRefusals) // absent: 0, the queue's default
	}
	if inRange(p, path+".circuit_failures", df.CircuitFailures, 0, 1_000_000) {
		d.Circuit.Failures = cmp.Or(int(df.CircuitFailures), -1) // 0: no circuit
	}
	if inRange(p, path+".circuit_cooldown", df.CircuitCooldown, 100*time.Millisecond, MaxDuration) {
		d.Circuit.Cooldown = df.CircuitCooldown
	}
	if p.has(path + ".headers") {
		d.Headers = p.headers(df.Headers, path+".headers")
	}
	if n := p.value(path + ".headroom"); n != nil {
		h, ok := parseShare(df.Headroom)
		if !ok || h > 0.9 {
			p.add(n, path+".headroom", nil, "must be a share of the quota from 0%% to 90%% (25%% or 0.25), got %q", df.Headroom)
		}
		d.Headroom = h
	}
	if n := p.value(path + ".cost_from"); n != nil {
		cf, err := queue.ParseCostFrom(df.CostFrom)
		if err != nil {
			p.add(n, path+".cost_from", err, "%s", strings.TrimPrefix(err.Error(), queue.ErrCostFrom.Error()+": "))
		}
		d.CostFrom = cf
	}
	if df.Concurrency > 0 {
		d.Concurrency = &throttle.Concurrency{Name: name, Max: df.Concurrency, Lease: cmp.Or(df.Lease, throttle.DefaultLease)}
	}
	return d
}

// pace checks the rate, per and burst of a downstream or of one of its
// also rates, at path, each defaulted when absent, and all three together
// as a GCRA policy, as the throttle will use them.
func (p *parser) pace(path string, rate int64, per time.Duration, burst int64) throttle.Limit {
	l, before := throttle.Limit{Rate: rate, Per: cmp.Or(per, time.Second), Burst: cmp.Or(burst, 1)}, len(p.errs)
	if !p.has(path + ".rate") {
		p.add(p.keys[path].key, path+".rate", nil, "required: the units allowed per `per`, at least 1")
	}
	inRange(p, path+".rate", rate, 1, algorithms.MaxLimit)
	if inRange(p, path+".per", per, algorithms.MinPeriod, algorithms.MaxPeriod) && per%time.Microsecond != 0 {
		p.add(p.value(path+".per"), path+".per", nil, "must be a whole number of microseconds, got %s", per)
	}
	inRange(p, path+".burst", burst, 1, algorithms.MaxLimit)
	if len(p.errs) == before && !p.keys[path].flawed {
		if err := (algorithms.Policy{Algorithm: algorithms.GCRA, Limit: l.Rate, Period: l.Per, Burst: l.Burst}).Validate(); err != nil {
			p.policy(err, path, map[string]string{"limit": "rate", "period": "per"})
		}
	}
	return l
}

// headers checks a downstream's headers (docs/policy.md, "Credentials") and
// returns them with canonical names and each ${VAR} expanded. Messages name
// the header and the variable, never a value.
func (p *parser) headers(e entries[string], path string) map[string]string {
	out := make(map[string]string, len(e))
	seen := map[string]string{} // canonical name -> the name as written
	for _, ent := range e {
		field := join(path, ent.name)
		name, pl := http.CanonicalHeaderKey(ent.name), p.keys[field]
		switch {
		case pl.bad:
			continue
		case downstream.CheckRequest("", map[string]string{ent.name: ""}) != nil:
			p.add(pl.key, field, nil, "a header name must be an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)")
			continue
		case seen[name] != "":
			p.add(pl.key, field, nil, "the same header as %s (names are not case-sensitive)", join(path, seen[name]))
			continue
		}
		seen[name] = ent.name
		val, err := expandEnv(ent.val)
		switch {
		case err != nil:
			p.add(pl.val, field, nil, "%v", err)
		case downstream.CheckRequest("", map[string]string{name: val}) != nil:
			p.add(pl.val, field, nil, "the value, once expanded, holds a control character other than tab")
		default:
			out[name] = val
		}
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
			return b.String() + s, nil
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

func (p *parser) tenant(tf *tenantFile, id, path string) Tenant {
	t, before := Tenant{ID: id, Weight: int(cmp.Or(tf.Weight, 1)), Class: tf.Class}, len(p.errs)
	inRange(p, path+".weight", tf.Weight, 1, 100)
	if n := p.value(path + ".class"); n != nil && !names.Valid(tf.Class, 32, "") {
		p.add(n, path+".class", nil, "use 1 to 32 bytes of [A-Za-z0-9_.-], got %q", limitLen(tf.Class, 40))
	}
	if len(p.errs) > before || p.keys[path].flawed ||
		!p.has(path+".algorithm") && !p.has(path+".limit") && !p.has(path+".period") && !p.has(path+".burst") {
		return t // a problem found, or no admission policy
	}
	pol := algorithms.Policy{Algorithm: algorithms.Algorithm(tf.Algorithm), Limit: tf.Limit, Period: tf.Period, Burst: tf.Burst}
	if err := pol.Validate(); err != nil {
		p.policy(err, path, nil)
	}
	t.Policy = &pol
	return t
}

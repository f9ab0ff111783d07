package policy

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/unicode/norm"

	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
)

// Limits and defaults of the schedules section (docs/policy.md, Periodic
// jobs).
const (
	// MaxSchedules is the most schedules a file may have.
	MaxSchedules = 1000
	// DefaultCatchUp is a schedule's catch_up when the file gives none.
	DefaultCatchUp = time.Minute
	// MaxEvery is the longest interval a schedule's every may give.
	MaxEvery = 366 * 24 * time.Hour
)

// Schedule is one entry of the schedules section: a job enqueued at each
// tick of a cron expression or of a fixed interval, once across the
// fleet (queue.Producer.EnqueueTick).
type Schedule struct {
	// Name is the entry's key, 1 to 64 bytes of [A-Za-z0-9_.-]: it names
	// the schedule's ticks in Redis, so renaming a schedule starts it
	// afresh.
	Name string
	// Cron is the cron expression as written (5 fields: minute, hour,
	// day of month, month, day of week; in UTC unless it starts with
	// CRON_TZ=<zone>); empty for an interval.
	Cron string
	// Every is the interval between ticks, whose ticks are the whole
	// multiples of it since the Unix epoch; 0 for a cron expression.
	Every time.Duration
	// CatchUp is how late a tick may still be enqueued: a tick found
	// more than CatchUp after its time (no worker ran then) is skipped.
	CatchUp time.Duration
	// Job is what each tick enqueues (its Tenant among it); its ID is
	// set per tick by the scheduler.
	Job queue.Job

	spec cron.Schedule // Cron parsed; nil for an interval
}

// Next returns the schedule's first tick strictly after t, in UTC; the
// zero time when there is none (a cron expression that never matches
// within five years, or a Schedule not made by Parse with an expression
// that does not parse).
func (s *Schedule) Next(t time.Time) time.Time {
	t = t.UTC()
	if s.Every > 0 {
		n := t.UnixNano() / int64(s.Every)
		if t.UnixNano() < 0 && t.UnixNano()%int64(s.Every) != 0 {
			n-- // floor, before 1970
		}
		return time.Unix(0, (n+1)*int64(s.Every)).UTC()
	}
	spec := s.spec
	if spec == nil {
		var err error
		if spec, err = parseCron(s.Cron); err != nil {
			return time.Time{}
		}
	}
	return spec.Next(t).UTC()
}

// cronParser reads the standard five fields. robfig/cron is what asynq's
// own scheduler parses with: its expressions mean what asynq's users
// already write, and its Next is tested against the calendar's corners
// (months' lengths, DST) that a parser of our own would get wrong.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// parseCron parses a 5-field expression, in UTC unless it names its zone
// with CRON_TZ= (or TZ=).
func parseCron(expr string) (s cron.Schedule, err error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		if !strings.Contains(expr, " ") {
			return nil, fmt.Errorf("%s names a time zone and no schedule", expr)
		}
	} else {
		expr = "CRON_TZ=UTC " + expr // robfig reads an expression without a zone in time.Local
	}
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return cronParser.Parse(expr)
}

// scheduleFile is one entry of the schedules section, as written.
type scheduleFile struct {
	Cron    string        `yaml:"cron"`
	Every   time.Duration `yaml:"every"`
	CatchUp time.Duration `yaml:"catch_up"`
	Tenant  string        `yaml:"tenant"`
	Job     jobFile       `yaml:"job"`
}

// jobFile is a schedule's job, as written: EnqueueRequest's fields but
// the id and the time to run, which each tick sets.
type jobFile struct {
	Type       string        `yaml:"type"`
	Downstream string        `yaml:"downstream"`
	Payload    rawNode       `yaml:"payload"`
	Cost       int64         `yaml:"cost"`
	MaxRetry   int64         `yaml:"max_retry"`
	Timeout    time.Duration `yaml:"timeout"`
}

// rawNode is a value that walk keeps as written, to be read later (a
// job's payload, any YAML value, which becomes JSON).
type rawNode struct{ n *yaml.Node }

// schedules checks the schedules section, with cfg's downstreams, types
// and tenants already made, and returns the schedules in the file's
// order.
func (p *parser) schedules(ents entries[scheduleFile], cfg *Config) []Schedule {
	if len(ents) > MaxSchedules {
		p.add(p.value("schedules"), "schedules", nil, "may have at most %d schedules, got %d", MaxSchedules, len(ents))
		return nil
	}
	var out []Schedule
	for _, ent := range ents {
		path := join("schedules", ent.name)
		pl := p.keys[path]
		if !names.Valid(ent.name, names.MaxLen, "") {
			p.add(pl.key, path, nil, "a schedule's name must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -", names.MaxLen)
			continue
		}
		if pl.bad {
			continue
		}
		if s, ok := p.schedule(&ent.val, ent.name, path, cfg); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) schedule(sf *scheduleFile, name, path string, cfg *Config) (Schedule, bool) {
	before := len(p.errs)
	s := Schedule{Name: name, Cron: sf.Cron, Every: sf.Every, CatchUp: cmp.Or(sf.CatchUp, DefaultCatchUp)}
	at := p.keys[path].key
	switch hasCron, hasEvery := p.has(path+".cron"), p.has(path+".every"); {
	case !hasCron && !hasEvery:
		p.add(at, path+".cron", nil, "required: a cron expression (cron: \"0 3 * * *\") or an interval (every: 10m)")
	case hasCron && hasEvery:
		p.add(cmp.Or(p.value(path+".every"), at), path+".every", nil, "give cron or every, not both")
	case hasCron:
		if n := p.value(path + ".cron"); n != nil {
			s.spec = p.cron(n, sf.Cron, path+".cron")
		}
	default:
		if inRange(p, path+".every", sf.Every, time.Second, MaxEvery) && sf.Every%time.Second != 0 {
			p.add(p.value(path+".every"), path+".every", nil, "must be a whole number of seconds, got %v", sf.Every)
		}
	}
	inRange(p, path+".catch_up", sf.CatchUp, time.Second, MaxDuration)
	if !p.has(path + ".tenant") {
		p.add(at, path+".tenant", nil, "required: the tenant whose job each tick enqueues")
	} else if n := p.value(path + ".tenant"); n != nil {
		switch t := sf.Tenant; {
		case t == "":
			p.add(n, path+".tenant", nil, "must not be empty")
		case len(t) > queue.MaxTenantLen:
			p.add(n, path+".tenant", nil, "a tenant id must be at most %d bytes, got %d", queue.MaxTenantLen, len(t))
		case !norm.NFC.IsNormalString(t):
			p.add(n, path+".tenant", nil, "a tenant id must be in Unicode normalization form C (NFC), as jobs name it: write %+q", norm.NFC.String(t))
		}
	}
	jpath := path + ".job"
	if !p.has(jpath) {
		p.add(at, jpath, nil, "required: the job each tick enqueues, such as {type: sluice.http, payload: {url: ...}}")
		return s, false
	}
	if p.keys[jpath].bad {
		return s, false
	}
	jf := &sf.Job
	if !p.has(jpath + ".type") {
		p.add(p.keys[jpath].key, jpath+".type", nil, "required: the job's type, such as %s", httpjob.Type)
	}
	s.Job = queue.Job{Tenant: sf.Tenant, Type: jf.Type, Downstream: jf.Downstream, Cost: jf.Cost, Timeout: jf.Timeout}
	inRange(p, jpath+".cost", jf.Cost, 0, queue.MaxCost)
	if inRange(p, jpath+".max_retry", jf.MaxRetry, -1, math.MaxInt32-1) {
		s.Job.MaxRetry = int(jf.MaxRetry)
	}
	inRange(p, jpath+".timeout", jf.Timeout, 0, MaxDuration)
	if n := p.value(jpath + ".type"); n != nil && !names.Valid(jf.Type, queue.MaxTypeLen, ":/") {
		p.add(n, jpath+".type", nil, "a job type is 1 to %d characters of A-Z, a-z, 0-9, _, ., :, / and -, got %s", queue.MaxTypeLen, describe(n))
	}
	if n := p.value(jpath + ".downstream"); n != nil && !names.Valid(jf.Downstream, names.MaxLen, "") {
		p.add(n, jpath+".downstream", nil, "a downstream's name is 1 to %d characters of A-Z, a-z, 0-9, _, . and -, got %s", names.MaxLen, describe(n))
	}
	if n := p.value(jpath + ".payload"); n != nil {
		v, ok := p.payload(jf.Payload.n, jpath+".payload")
		if ok && v != nil { // null: no payload
			b, err := json.Marshal(v)
			if err != nil {
				p.add(n, jpath+".payload", err, "cannot be written as JSON: %v", err)
			}
			s.Job.Payload = b
			if len(b) > int(cfg.Queue.MaxPayload) {
				p.add(n, jpath+".payload", nil, "is %d bytes as JSON; queue.max_payload is %d", len(b), cfg.Queue.MaxPayload)
			}
		}
	}
	if len(p.errs) > before || p.keys[path].flawed {
		return s, false
	}
	// What a producer would refuse at each tick, refused now: an unknown
	// type or downstream, an HTTP request that could never be sent, a
	// cost no slot could hold.
	if err := cfg.CheckJob(&s.Job); err != nil {
		field := jpath
		switch {
		case errors.Is(err, ErrUnknownType):
			field = jpath + ".type"
		case s.Job.Type == httpjob.Type && s.Job.Downstream == "":
			field = jpath + ".downstream" // required: reported at the job
		case s.Job.Type == httpjob.Type && !errors.Is(err, ErrUnknownDownstream):
			field = jpath + ".payload"
		case errors.Is(err, ErrUnknownDownstream) && p.has(jpath+".downstream"):
			field = jpath + ".downstream"
		case s.Job.Cost > 0:
			field = jpath + ".cost"
		}
		n := p.value(field)
		if n == nil {
			n = p.keys[jpath].key
		}
		p.add(n, field, err, "%v", err)
		return s, false
	}
	if t, ok := cfg.TenantPolicy(s.Job.Tenant); ok && t.Policy != nil && max(s.Job.Cost, 1) > t.Policy.Capacity() {
		p.add(cmp.Or(p.value(jpath+".cost"), p.keys[jpath].key), jpath+".cost", nil,
			"cost %d exceeds the capacity %d of tenant %.64q's admission policy, so no tick could be admitted", max(s.Job.Cost, 1), t.Policy.Capacity(), s.Job.Tenant)
		return s, false
	}
	return s, true
}

// cron parses a schedule's cron expression, reporting a problem at n.
func (p *parser) cron(n *yaml.Node, expr, path string) cron.Schedule {
	if strings.HasPrefix(strings.TrimSpace(expr), "@") {
		p.add(n, path, nil, "descriptors such as @daily are not taken: write the 5 fields (\"0 0 * * *\"), or every: for an interval")
		return nil
	}
	spec, err := parseCron(expr)
	if err != nil {
		p.add(n, path, err, "not a cron expression of 5 fields (minute hour day-of-month month day-of-week, such as \"0 3 * * *\"): %v", err)
		return nil
	}
	if spec.Next(time.Now()).IsZero() {
		p.add(n, path, nil, "%q never matches a date (within 5 years)", expr)
		return nil
	}
	return spec
}

// payload reads a job's payload, any YAML value, as the value that
// encoding/json writes: mappings (keys plain values, each once), lists
// and scalars.
func (p *parser) payload(n *yaml.Node, path string) (any, bool) {
	switch n.Kind {
	case yaml.AliasNode:
		p.add(n, path, nil, noAlias)
		return nil, false
	case yaml.MappingNode:
		m := map[string]any{}
		for _, pr := range p.pairs(n, path) {
			v, ok := p.payload(pr.val, join(path, pr.name))
			if !ok {
				return nil, false
			}
			m[pr.name] = v
		}
		return m, true
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, it := range n.Content {
			v, ok := p.payload(it, fmt.Sprintf("%s[%d]", path, i))
			if !ok {
				return nil, false
			}
			list = append(list, v)
		}
		return list, true
	}
	if !standardTag(n) {
		p.add(n, path, nil, "unsupported tag %s", n.ShortTag())
		return nil, false
	}
	var v any
	if err := n.Decode(&v); err != nil {
		p.add(n, path, err, "%v", err)
		return nil, false
	}
	if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
		p.add(n, path, nil, "JSON has no %s", n.Value)
		return nil, false
	}
	return v, true
}

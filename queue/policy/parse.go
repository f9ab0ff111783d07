package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/throttle"
)

// A policy file is read in three steps. The YAML library parses it into a
// tree of nodes. One pass over the tree (walk) checks each key against the
// yaml tags of the struct below that it fills and each value against its
// Go type, fills the structs, and notes every key and value by field path.
// Last, the checks of validate.go make a Config of them, finding the place
// of each problem by its path. Aliases and merge keys are refused where
// they stand (noAlias, noMerge): each key and value is where it is
// written, so every problem has the line of the text to change, and the
// pass visits each node of the file once.

const (
	noAlias = "aliases (*name) are not taken: write the value out"
	noMerge = "merge keys (<<) are not taken: write the keys out"
)

// file is a policy file as written.
type file struct {
	Queue       queueFile               `yaml:"queue"`
	Downstreams entries[downstreamFile] `yaml:"downstreams"`
	Tenants     entries[tenantFile]     `yaml:"tenants"`
	Schedules   entries[scheduleFile]   `yaml:"schedules"`
}

type queueFile struct {
	Name        string        `yaml:"name"`
	Bound       int64         `yaml:"bound"`
	TenantBound int64         `yaml:"tenant_bound"`
	Shards      int64         `yaml:"shards"`
	Prefetch    int64         `yaml:"prefetch"`
	MaxPayload  byteSize      `yaml:"max_payload"`
	Retention   time.Duration `yaml:"retention"`
	Types       []string      `yaml:"types"`
	// Replicas and ReplicaTimeout: replicated enqueue (WAIT).
	Replicas       int64         `yaml:"replicas"`
	ReplicaTimeout time.Duration `yaml:"replica_timeout"`
}

type downstreamFile struct {
	BaseURL     string          `yaml:"base_url"`
	Rate        int64           `yaml:"rate"`
	Per         time.Duration   `yaml:"per"`
	Burst       int64           `yaml:"burst"`
	Also        []rateFile      `yaml:"also"`
	MaxWait     waitDuration    `yaml:"max_wait"`
	Guard       time.Duration   `yaml:"guard"`
	Concurrency int64           `yaml:"concurrency"`
	Lease       time.Duration   `yaml:"lease"`
	PerTenant   bool            `yaml:"per_tenant"`
	Timeout     time.Duration   `yaml:"timeout"`
	Headers     entries[string] `yaml:"headers"`
	MaxRefusals int64           `yaml:"max_refusals"`
	CostFrom    string          `yaml:"cost_from"`
	// circuit_failures 0 is no circuit; absent, the default.
	CircuitFailures int64         `yaml:"circuit_failures"`
	CircuitCooldown time.Duration `yaml:"circuit_cooldown"`
	Headroom        string        `yaml:"headroom"`
}

type rateFile struct {
	Rate   int64         `yaml:"rate"`
	Per    time.Duration `yaml:"per"`
	Burst  int64         `yaml:"burst"`
	Counts string        `yaml:"counts"`
}

type tenantFile struct {
	Algorithm string        `yaml:"algorithm"`
	Limit     int64         `yaml:"limit"`
	Period    time.Duration `yaml:"period"`
	Burst     int64         `yaml:"burst"`
	Weight    int64         `yaml:"weight"`
	Class     string        `yaml:"class"`
}

// byteSize is a number of bytes, written with an optional B, KiB or MiB
// suffix.
type byteSize int64

func (b byteSize) String() string { // for the limits, 1B and 64MiB
	if b >= 1<<20 && b%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", b>>20)
	}
	return fmt.Sprintf("%dB", int64(b))
}

// waitDuration is max_wait: a duration, or none (read as -1) for only a
// slot that is due now, as throttle.NoWait in Go.
type waitDuration time.Duration

// entries is a mapping from names to T, in the order of the file.
type entries[T any] []entry[T]

type entry[T any] struct {
	name string
	val  T
}

// add appends an entry called name and returns its value, for walk to
// fill.
func (e *entries[T]) add(name string) reflect.Value {
	*e = append(*e, entry[T]{name: name})
	return reflect.ValueOf(&(*e)[len(*e)-1].val).Elem()
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	sizeType     = reflect.TypeFor[byteSize]()
	waitType     = reflect.TypeFor[waitDuration]()
)

// place is a key and its value in the file (for an item of a list, the
// item twice). bad tells that the value cannot be used, flawed that the
// pass found problems in it; both are reported.
type place struct {
	key, val    *yaml.Node
	bad, flawed bool
}

// parser reads one file, collecting its problems.
type parser struct {
	keys map[string]place // by field path; "" for the document
	errs ErrorList
}

func (p *parser) add(n *yaml.Node, field string, cause error, format string, args ...any) {
	p.errs = append(p.errs, &Error{Line: max(n.Line, 1), Column: n.Column, Field: field, Msg: fmt.Sprintf(format, args...), Err: cause})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode reads data, one YAML document, into a Config.
func decode(data []byte) (*Config, ErrorList) {
	p := &parser{keys: map[string]place{}}
	var doc, next yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if err == nil {
		if err = dec.Decode(&next); err == nil {
			p.add(next.Content[0], "", nil, "a policy file holds one YAML document; remove the second one (after ---)")
			return nil, p.errs
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		msg, at := strings.TrimPrefix(err.Error(), "yaml: "), &yaml.Node{}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			at.Line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		p.add(at, "", err, "not valid YAML: %s", msg)
		return nil, p.errs
	}
	if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		p.add(&yaml.Node{Line: 1}, "queue.bound", nil, "required; the file is empty or null")
		return nil, p.errs
	}
	root := doc.Content[0]
	p.keys[""] = place{key: root, val: root}
	var f file
	if !p.walk(root, reflect.ValueOf(&f).Elem(), "") {
		return nil, p.errs
	}
	cfg := p.config(&f)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return cfg, nil
}

// walk checks n, the value at path, and fills v with it: entries, a list,
// a struct or a leaf (see scalar). Only the keys that v has are taken,
// each once. It returns false when n cannot be used, the problem
// reported.
func (p *parser) walk(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind == yaml.AliasNode {
		p.add(n, path, nil, noAlias)
		return false
	}
	if raw, ok := v.Addr().Interface().(*rawNode); ok {
		raw.n = n // read by its check (a job's payload)
		return true
	}
	t := v.Type()
	ents, isEntries := v.Addr().Interface().(interface{ add(string) reflect.Value })
	switch {
	case !isEntries && t.Kind() != reflect.Slice && t.Kind() != reflect.Struct:
		return p.scalar(n, v, path)
	case (isEntries || t.Kind() == reflect.Struct) && n.ShortTag() == "!!null":
		return true // no entries, no fields
	case t.Kind() == reflect.Slice && !isEntries:
		return p.list(n, v, path)
	case n.Kind != yaml.MappingNode:
		p.add(n, path, nil, "must be a mapping of keys to values, got %s", describe(n))
		return false
	}
	var known []string
	for i := 0; !isEntries && i < t.NumField(); i++ {
		known = append(known, t.Field(i).Tag.Get("yaml"))
	}
	for _, pr := range p.pairs(n, path) {
		field, i := join(path, pr.name), slices.Index(known, pr.name)
		var fv reflect.Value
		switch {
		case isEntries:
			fv = ents.add(pr.name) // an entry's name is checked even when its value cannot be used
		case i >= 0:
			fv = v.Field(i)
		default:
			p.add(pr.key, field, nil, "unknown field; %s", suggest(pr.name, known))
			continue
		}
		before := len(p.errs)
		ok := p.walk(pr.val, fv, field)
		p.keys[field] = place{key: pr.key, val: pr.val, bad: !ok, flawed: len(p.errs) > before}
	}
	return true
}

// list checks a list (an also list of rates, or queue.types of names)
// and fills v with it.
func (p *parser) list(n *yaml.Node, v reflect.Value, path string) bool {
	rates := v.Type().Elem().Kind() == reflect.Struct
	if n.Kind != yaml.SequenceNode {
		msg := "must be a list of rates such as [{rate: 1000, per: 1h}], got " + describe(n)
		if !rates {
			msg = "must be a list of job types such as [email.send, report.build], got " + describe(n)
		}
		if n.ShortTag() == "!!null" {
			msg = "has no value"
		}
		p.add(n, path, nil, "%s", msg)
		return false
	}
	v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
	for i, it := range n.Content {
		field, before, ok := fmt.Sprintf("%s[%d]", path, i), len(p.errs), false
		if rates && it.ShortTag() == "!!null" { // walk takes null for a mapping without keys
			p.add(it, field, nil, "must be a mapping of keys to values, got null")
		} else {
			ok = p.walk(it, v.Index(i), field)
		}
		p.keys[field] = place{key: it, val: it, bad: !ok, flawed: len(p.errs) > before}
	}
	return true
}

// pair is one key of a mapping, with its value.
type pair struct {
	name     string
	key, val *yaml.Node
}

// pairs returns the keys of the mapping n with their values. A key given
// twice, or a merge key, is reported and left out.
func (p *parser) pairs(n *yaml.Node, path string) []pair {
	var out []pair
	lines := map[string]int{} // where each name is first written
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			p.add(k, path, nil, noMerge)
			continue
		}
		name, ok := p.keyName(k, path)
		if !ok {
			continue
		}
		if line, dup := lines[name]; dup {
			p.add(k, join(path, name), nil, "defined twice: first at line %d, again at line %d", line, k.Line)
			continue
		}
		lines[name] = k.Line
		out = append(out, pair{name, k, v})
	}
	return out
}

// keyName returns the text of a mapping key.
func (p *parser) keyName(k *yaml.Node, path string) (string, bool) {
	v := k
	switch {
	case v.Kind == yaml.AliasNode:
		p.add(k, path, nil, noAlias)
	case v.Kind != yaml.ScalarNode:
		p.add(k, path, nil, "keys must be plain values, got %s", describe(v))
	case v.ShortTag() == "!!null":
		p.add(k, path, nil, "a key must not be null (quote it to use %q)", v.Value)
	case !standardTag(v):
		p.add(k, path, nil, "unsupported tag %s on a key", v.ShortTag())
	default:
		return v.Value, true
	}
	return "", false
}

var sizePattern = regexp.MustCompile(`^([0-9][0-9_]*) ?(B|KiB|MiB)?$`)

// scalar checks a single value as docs/policy.md ("Values") says, and
// fills v with it. A string is taken as written, whatever YAML reads it as.
func (p *parser) scalar(n *yaml.Node, v reflect.Value, path string) bool {
	tag, t, x, err := n.ShortTag(), v.Type(), int64(0), error(nil)
	switch {
	case tag == "!!null":
		err = errors.New("has no value")
	case n.Kind != yaml.ScalarNode:
		err = fmt.Errorf("must be a single value, got %s", describe(n))
	case !standardTag(n):
		err = fmt.Errorf("unsupported tag %s", tag)
	case t.Kind() == reflect.String:
		v.SetString(n.Value)
	case t.Kind() == reflect.Bool && (tag != "!!bool" || !slices.Contains([]string{"true", "false"}, strings.ToLower(n.Value))):
		err = fmt.Errorf("must be true or false, got %s", describe(n))
	case t.Kind() == reflect.Bool:
		v.SetBool(strings.ToLower(n.Value) == "true")
	case t == durationType:
		x, err = readDuration(n)
	case t == waitType && tag == "!!str" && strings.TrimSpace(n.Value) == "none":
		x = int64(throttle.NoWait)
	case t == waitType:
		if x, err = readDuration(n); err != nil {
			err = fmt.Errorf("%w; or none, for only a slot due now", err)
		}
	case t == sizeType:
		x, err = readSize(n)
	case tag != "!!int" && tag != "!!float":
		err = fmt.Errorf("must be a whole number, got %s", describe(n))
	default:
		x, err = parseDecimal(n.Value)
	}
	if err != nil {
		p.add(n, path, nil, "%v", err)
		return false
	}
	if t.Kind() == reflect.Int64 {
		v.SetInt(x)
	}
	return true
}

// readDuration reads a duration, in nanoseconds.
func readDuration(n *yaml.Node) (int64, error) {
	s := strings.TrimSpace(n.Value)
	d, err := time.ParseDuration(s)
	switch {
	case n.ShortTag() == "!!int" || n.ShortTag() == "!!float" || !strings.ContainsFunc(s, unicode.IsLetter):
		return 0, fmt.Errorf("a duration needs a unit, such as %q or %q; got %s", s+"s", s+"ms", describe(n))
	case err != nil:
		return 0, errors.New("must be a duration such as \"10s\", \"500ms\" or \"1m30s\", got " + describe(n))
	case d < 0:
		return 0, errors.New("must not be negative, got " + d.String())
	}
	return int64(d), nil
}

// readSize reads a byteSize, in bytes (math.MaxInt64 when more).
func readSize(n *yaml.Node) (int64, error) {
	digits, shift := n.Value, 0
	if m := sizePattern.FindStringSubmatch(strings.TrimSpace(n.Value)); n.ShortTag() == "!!str" && m != nil {
		digits, shift = m[1], map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20}[m[2]]
	} else if n.ShortTag() != "!!int" {
		return 0, fmt.Errorf("must be a size such as 65536, 512KiB or 1MiB, got %s", describe(n))
	}
	v, err := parseDecimal(digits)
	if v > math.MaxInt64>>shift {
		v, shift = math.MaxInt64, 0
	}
	return v << shift, err
}

func standardTag(v *yaml.Node) bool {
	return slices.Contains([]string{"!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp"}, v.ShortTag())
}

var decimal = regexp.MustCompile(`^[-+]?[0-9]+(_[0-9]+)*$`)

// parseDecimal reads an optionally signed decimal integer, with optional
// underscores between digits.
func parseDecimal(s string) (int64, error) {
	why := ""
	if digits := strings.TrimLeft(s, "+-"); decimal.MatchString(s) && len(digits) > 1 && digits[0] == '0' {
		why = " (a leading zero would make YAML read it as octal; remove it)"
	}
	if !decimal.MatchString(s) || why != "" {
		return 0, fmt.Errorf("must be a whole number in decimal digits, got %s%s", limitLen(s, 40), why)
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is out of range", s)
	}
	return i, nil
}

// describe names what a node is, for error messages.
func describe(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	s := limitLen(v.Value, 40)
	switch v.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return "the string " + strconv.Quote(s)
	case "!!int", "!!float":
		return "the number " + s
	case "!!bool":
		return s
	}
	return strconv.Quote(s) + " (" + v.ShortTag() + ")"
}

// suggest names the field of want that name may be: the closest, if it is
// close, or else all of them.
func suggest(name string, want []string) string {
	best, bestD := "", 3
	for i := 0; len(name) <= 64 && i < len(want); i++ {
		if d := distance(strings.ToLower(name), want[i]); d < bestD {
			best, bestD = want[i], d
		}
	}
	if best == "" {
		return "expected one of " + strings.Join(want, ", ")
	}
	return fmt.Sprintf("did you mean %q?", best)
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			change := 1
			if a[i-1] == b[j-1] {
				change = 0
			}
			cur[j] = min(prev[j-1]+change, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// join appends a key to a field path: a dot and the key when the key is
// a name without a dot ([A-Za-z0-9_-]), else the key quoted in brackets
// (and cut short).
func join(field, key string) string {
	switch {
	case !names.Valid(key, names.MaxLen, "") || strings.Contains(key, "."):
		return field + "[" + strconv.Quote(limitLen(key, 48)) + "]"
	case field == "":
		return key
	}
	return field + "." + key
}

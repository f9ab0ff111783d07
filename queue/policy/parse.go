package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/names"
)

// A policy file is read in four steps. The YAML library parses it into a
// tree of nodes. One pass over the tree (walk) follows its aliases and
// merge keys, checks every key against the yaml tags of the struct that it
// is decoded into, and notes where each key is written, by field path. The
// library then decodes the checked tree into the structs below, whose
// values are small types that keep where they are written and what is
// wrong with them. Last, the checks of validate.go turn those into a
// Config.

// Bounds on the work of the pass, so that a small file of aliases cannot
// make it slow.
const (
	// nodeBudget is the most keys and values the pass visits, each alias
	// and merge key expanded. A larger file gets two per byte: a file
	// without aliases never needs that many.
	nodeBudget = 1_000_000
	// maxMergedKeys bounds the keys of one mapping that a merge key brings
	// in.
	maxMergedKeys = 1000
)

// file is a policy file as written.
type file struct {
	Queue       queueFile               `yaml:"queue"`
	Downstreams entries[downstreamFile] `yaml:"downstreams"`
	Tenants     entries[tenantFile]     `yaml:"tenants"`
}

// queueFile is the queue section as written.
type queueFile struct {
	Name        text     `yaml:"name"`
	Bound       integer  `yaml:"bound"`
	TenantBound integer  `yaml:"tenant_bound"`
	Prefetch    integer  `yaml:"prefetch"`
	MaxPayload  size     `yaml:"max_payload"`
	Retention   duration `yaml:"retention"`
}

// downstreamFile is one entry of the downstreams section as written.
type downstreamFile struct {
	BaseURL     text          `yaml:"base_url"`
	Rate        integer       `yaml:"rate"`
	Per         duration      `yaml:"per"`
	Burst       integer       `yaml:"burst"`
	Also        []rateFile    `yaml:"also"`
	MaxWait     duration      `yaml:"max_wait"`
	Concurrency integer       `yaml:"concurrency"`
	Lease       duration      `yaml:"lease"`
	PerTenant   boolean       `yaml:"per_tenant"`
	Timeout     duration      `yaml:"timeout"`
	Headers     entries[text] `yaml:"headers"`
}

// rateFile is one item of a downstream's also list as written.
type rateFile struct {
	Rate   integer  `yaml:"rate"`
	Per    duration `yaml:"per"`
	Burst  integer  `yaml:"burst"`
	Counts text     `yaml:"counts"`
}

// tenantFile is one entry of the tenants section as written.
type tenantFile struct {
	Algorithm text     `yaml:"algorithm"`
	Limit     integer  `yaml:"limit"`
	Period    duration `yaml:"period"`
	Burst     integer  `yaml:"burst"`
	Weight    integer  `yaml:"weight"`
	Class     text     `yaml:"class"`
}

// entries is a mapping from names to T, in the order of the file.
type entries[T any] []entry[T]

type entry[T any] struct {
	name string
	val  T
}

// UnmarshalYAML decodes each entry on its own (the library would compare
// every key with every other), keeping their order.
func (e *entries[T]) UnmarshalYAML(n *yaml.Node) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		ent := entry[T]{name: n.Content[i].Value}
		if err := n.Content[i+1].Decode(&ent.val); err != nil {
			return err
		}
		*e = append(*e, ent)
	}
	return nil
}

func (entries[T]) valueType() reflect.Type { return reflect.TypeFor[T]() }

// spot is where a node is written: line and column, from 1.
type spot struct{ line, col int }

func spotOf(n *yaml.Node) spot { return spot{n.Line, n.Column} }

// place is where a key and its value are written (for an item of a list,
// the item twice). bad tells that the value is unusable, flawed that the
// walk found problems in it; both are already reported.
type place struct {
	key, val    spot
	bad, flawed bool
}

// parser reads one file, collecting its problems.
type parser struct {
	budget, visits int
	over           *Error              // where the budget ran out
	open           map[*yaml.Node]bool // the mappings being walked
	keys           map[string]place    // by field path; "" for the document
	errs           ErrorList
}

func (p *parser) add(at spot, field string, cause error, format string, args ...any) {
	p.errs = append(p.errs, &Error{Line: max(at.line, 1), Column: at.col, Field: field, Msg: fmt.Sprintf(format, args...), Err: cause})
}

// has reports whether the file has a key at path, usable or not.
func (p *parser) has(path string) bool {
	_, ok := p.keys[path]
	return ok
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode reads data, one YAML document, into a Config. The pass visits
// at most budget keys and values; decode returns how many it visited.
func decode(data []byte, budget int) (*Config, ErrorList, int) {
	p := &parser{budget: budget, open: map[*yaml.Node]bool{}, keys: map[string]place{}}
	var doc, next yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if err == nil {
		if err = dec.Decode(&next); err == nil {
			p.add(spotOf(next.Content[0]), "", nil, "a policy file holds one YAML document; remove the second one (after ---)")
			return nil, p.errs, 0
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		msg, at := strings.TrimPrefix(err.Error(), "yaml: "), spot{}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			at.line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		p.add(at, "", err, "not valid YAML: %s", msg)
		return nil, p.errs, 0
	}
	if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		p.add(spot{line: 1}, "queue.bound", nil, "required; the file is empty or null")
		return nil, p.errs, 0
	}
	root := doc.Content[0]
	p.keys[""] = place{key: spotOf(root), val: spotOf(root)}
	checked := p.walk(root, reflect.TypeFor[file](), "")
	if p.over != nil {
		return nil, ErrorList{p.over}, p.visits
	}
	if checked == nil {
		return nil, p.errs, p.visits
	}
	var f file
	if err := checked.Decode(&f); err != nil {
		p.add(spotOf(root), "", err, "%v", err) // not expected: the tree was checked
		return nil, p.errs, p.visits
	}
	cfg := p.config(&f)
	if len(p.errs) > 0 {
		return nil, p.errs, p.visits
	}
	return cfg, nil, p.visits
}

// visit counts one key or value; false once the budget is spent.
func (p *parser) visit(n *yaml.Node, path string) bool {
	if p.over == nil {
		if p.visits++; p.visits > p.budget {
			p.over = &Error{Line: max(n.Line, 1), Column: n.Column, Field: path,
				Msg: "the file is too large once its aliases and merge keys are expanded"}
		}
	}
	return p.over == nil
}

var (
	null        = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"} // in place of a value that cannot be used
	unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
	nameMap     = reflect.TypeFor[namedValues]()
)

// namedValues is what entries of any type have: the type of their values.
type namedValues interface{ valueType() reflect.Type }

// walk checks n, the value at path, which is to be decoded into a t: a
// leaf type (an Unmarshaler), entries, a list or a struct. It returns a
// tree that the library can decode without surprise: aliases followed,
// merge keys expanded, only the keys that t has, each once. It returns nil
// when n cannot be used, the problem reported.
func (p *parser) walk(n *yaml.Node, t reflect.Type, path string) *yaml.Node {
	if !p.visit(n, path) {
		return nil
	}
	entries := t.Implements(nameMap)
	leaf := !entries && reflect.PointerTo(t).Implements(unmarshaler)
	list := !entries && t.Kind() == reflect.Slice
	switch {
	case n.ShortTag() == "!!null" && (leaf || list):
		p.add(spotOf(n), path, nil, "has no value")
		return nil
	case leaf || n.ShortTag() == "!!null":
		return n
	case list:
		if n.Kind != yaml.SequenceNode {
			// also, the only list of the file
			p.add(spotOf(n), path, nil, "must be a list of rates such as [{rate: 1000, per: 1h}], got %s", describe(n))
			return nil
		}
		out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i, it := range n.Content {
			field := fmt.Sprintf("%s[%d]", path, i)
			before := len(p.errs)
			v := p.deref(it, field, "an alias names a mapping or list that contains it")
			if v != nil && v.Kind != yaml.MappingNode {
				p.add(spotOf(v), field, nil, "must be a mapping of keys to values, got %s", describe(v))
				v = nil
			} else if v != nil {
				v = p.walk(v, t.Elem(), field)
			}
			p.keys[field] = place{key: spotOf(it), val: spotOf(it), bad: v == nil, flawed: len(p.errs) > before}
			out.Content = append(out.Content, cmp.Or(v, null))
		}
		return out
	case n.Kind != yaml.MappingNode:
		p.add(spotOf(n), path, nil, "must be a mapping of keys to values, got %s", describe(n))
		return nil
	}
	p.open[n] = true
	defer delete(p.open, n)
	var known []string
	if !entries {
		for i := range t.NumField() {
			known = append(known, t.Field(i).Tag.Get("yaml"))
		}
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, pr := range p.pairs(n, path, "") {
		field, ft := join(path, pr.name), reflect.Type(nil)
		if entries {
			ft = reflect.Zero(t).Interface().(namedValues).valueType()
		} else if i := indexOf(known, pr.name); i >= 0 {
			ft = t.Field(i).Type
		} else {
			p.unknown(pr.name, spotOf(pr.key), field, known)
			continue
		}
		before := len(p.errs)
		v := p.walk(pr.val, ft, field)
		p.keys[field] = place{key: spotOf(pr.key), val: spotOf(pr.val), bad: v == nil, flawed: len(p.errs) > before}
		if v != nil || entries { // an entry's name is checked even when its value is unusable
			k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: pr.name}
			out.Content = append(out.Content, k, cmp.Or(v, null))
		}
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// pair is one key of a mapping, with its value, aliases followed.
type pair struct {
	name     string
	key, val *yaml.Node
}

// pairs returns the keys of the mapping n with their values: its own, then
// those that its merge keys (<<) bring in and it does not have, the first
// merged winning. A key given twice is reported, in the words of in for a
// mapping that a merge key brings in.
func (p *parser) pairs(n *yaml.Node, path, in string) []pair {
	var out []pair
	var merges []*yaml.Node
	lines := map[string]int{} // where each name is first written
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !p.visit(k, path) {
			return nil
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		name, ok := p.keyName(k, path)
		if !ok {
			continue
		}
		field := join(path, name)
		if line, dup := lines[name]; dup {
			p.add(spotOf(k), field, nil, "defined twice%s: first at line %d, again at line %d", in, line, k.Line)
			continue
		}
		lines[name] = k.Line
		if v = p.deref(v, field, "an alias names a mapping or list that contains it"); v == nil {
			p.keys[field] = place{key: spotOf(k), bad: true}
			continue
		}
		out = append(out, pair{name, k, v})
	}
	for _, m := range merges {
		for _, src := range p.mergeSources(m, path) {
			p.open[src] = true
			for _, pr := range p.pairs(src, path, " in a merged mapping") {
				if _, seen := lines[pr.name]; !seen {
					lines[pr.name] = pr.key.Line
					out = append(out, pr)
				}
			}
			delete(p.open, src)
		}
	}
	return out
}

// mergeSources returns the mappings that the value of a merge key names:
// one mapping, or a list of them.
func (p *parser) mergeSources(v *yaml.Node, path string) []*yaml.Node {
	const loop = "a merge key (<<) merges a mapping into itself"
	items, where := []*yaml.Node{v}, ""
	if d := p.deref(v, path, loop); d == nil {
		return nil
	} else if d.Kind == yaml.SequenceNode {
		items, where = d.Content, " in the list"
	}
	var out []*yaml.Node
	for _, it := range items {
		src := p.deref(it, path, loop)
		switch {
		case src == nil:
		case src.Kind != yaml.MappingNode:
			p.add(spotOf(it), path, nil, "a merge key (<<) takes a mapping or a list of mappings, got %s%s", describe(src), where)
		case len(src.Content)/2 > maxMergedKeys:
			p.add(spotOf(it), path, nil, "a merge key (<<) may bring in at most %d keys, got %d", maxMergedKeys, len(src.Content)/2)
		default:
			out = append(out, src)
		}
	}
	return out
}

// deref follows an alias. It returns nil, reporting msg, for an alias that
// names a mapping being walked: its expansion would never end.
func (p *parser) deref(n *yaml.Node, path, msg string) *yaml.Node {
	if n.Kind != yaml.AliasNode || n.Alias == nil {
		return n
	}
	if p.open[n.Alias] {
		p.add(spotOf(n), path, nil, "%s", msg)
		return nil
	}
	return n.Alias
}

// keyName returns the text of a mapping key.
func (p *parser) keyName(k *yaml.Node, path string) (string, bool) {
	v := k
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		v = k.Alias
	}
	switch {
	case v.Kind != yaml.ScalarNode:
		p.add(spotOf(k), path, nil, "keys must be plain values, got %s", describe(v))
	case v.ShortTag() == "!!null":
		p.add(spotOf(k), path, nil, "a key must not be null (quote it to use %q)", v.Value)
	case !standardTag(v):
		p.add(spotOf(k), path, nil, "unsupported tag %s on a key", v.ShortTag())
	default:
		return v.Value, true
	}
	return "", false
}

// unknown reports a key that is none of known, suggesting the closest.
func (p *parser) unknown(name string, at spot, field string, known []string) {
	if s := suggest(name, known); s != "" {
		p.add(at, field, nil, "unknown field; did you mean %q?", s)
		return
	}
	p.add(at, field, nil, "unknown field; expected one of %s", strings.Join(known, ", "))
}

// leaf is what each value keeps besides the value: where it is written,
// whether it is, and why it cannot be used, if it cannot.
type leaf struct {
	at  spot
	set bool
	bad string
}

// scalar notes n's place; it reports whether n is a single value with a
// standard tag.
func (l *leaf) scalar(n *yaml.Node) bool {
	l.at, l.set = spotOf(n), true
	switch {
	case n.Kind != yaml.ScalarNode:
		l.bad = "must be a single value, got " + describe(n)
	case !standardTag(n):
		l.bad = "unsupported tag " + n.ShortTag()
	}
	return l.bad == ""
}

// text is a value taken as written: strings, and values that YAML would
// read as numbers or booleans alike.
type text struct {
	leaf
	v    string
	desc string // describe's, for messages
}

// UnmarshalYAML reads a single value.
func (t *text) UnmarshalYAML(n *yaml.Node) error {
	if t.scalar(n) {
		t.v, t.desc = n.Value, describe(n)
	}
	return nil
}

// integer is a whole number written in decimal digits.
type integer struct {
	leaf
	v int64
}

// UnmarshalYAML reads a whole number, refusing the forms that YAML reads
// in other bases or as floats.
func (i *integer) UnmarshalYAML(n *yaml.Node) error {
	if !i.scalar(n) {
		return nil
	}
	if tag := n.ShortTag(); tag != "!!int" && tag != "!!float" {
		i.bad = "must be a whole number, got " + describe(n)
		return nil
	}
	var err error
	if i.v, err = parseDecimal(n.Value); err != nil {
		i.bad = err.Error()
	}
	return nil
}

// duration is a Go duration string ("1s", "500ms", "1m30s"), not negative.
type duration struct {
	leaf
	v time.Duration
}

// UnmarshalYAML reads a duration; a number without a unit is refused.
func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if !d.scalar(n) {
		return nil
	}
	s := strings.TrimSpace(n.Value)
	hasUnit := strings.IndexFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' || r == 'µ' || r == 'μ' }) >= 0
	switch v, err := time.ParseDuration(s); {
	case n.ShortTag() == "!!int" || n.ShortTag() == "!!float":
		d.bad = fmt.Sprintf("a duration needs a unit, such as %q or %q; got %s", n.Value+"s", n.Value+"ms", describe(n))
	case !hasUnit:
		d.bad = "a duration needs a unit, such as \"10s\" or \"500ms\"; got " + describe(n)
	case err != nil:
		d.bad = "must be a duration such as \"10s\", \"500ms\" or \"1m30s\", got " + describe(n)
	case v < 0:
		d.bad = "must not be negative, got " + v.String()
	default:
		d.v = v
	}
	return nil
}

// size is a number of bytes: a whole number, or one with a B, KiB or MiB
// suffix.
type size struct {
	leaf
	v    int64  // math.MaxInt64 when larger
	text string // as written
}

var sizePattern = regexp.MustCompile(`^([0-9][0-9_]*) ?(B|KiB|MiB)?$`)

// UnmarshalYAML reads a size.
func (s *size) UnmarshalYAML(n *yaml.Node) error {
	if !s.scalar(n) {
		return nil
	}
	s.text = n.Value
	digits, shift := n.Value, 0
	if n.ShortTag() != "!!int" {
		m := sizePattern.FindStringSubmatch(strings.TrimSpace(n.Value))
		if n.ShortTag() != "!!str" || m == nil {
			s.bad = "must be a size such as 65536, 512KiB or 1MiB, got " + describe(n)
			return nil
		}
		digits, shift = m[1], map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20}[m[2]]
	}
	v, err := parseDecimal(digits)
	switch {
	case err != nil:
		s.bad = err.Error()
	case v > math.MaxInt64>>shift:
		s.v = math.MaxInt64
	default:
		s.v = v << shift
	}
	return nil
}

// boolean is true or false.
type boolean struct {
	leaf
	v bool
}

// UnmarshalYAML reads a boolean: YAML's true and false, not yes or on.
func (b *boolean) UnmarshalYAML(n *yaml.Node) error {
	if !b.scalar(n) {
		return nil
	}
	if n.ShortTag() != "!!bool" {
		b.bad = "must be true or false, got " + describe(n)
		return nil
	}
	b.v = strings.EqualFold(n.Value, "true")
	return nil
}

func standardTag(v *yaml.Node) bool {
	switch v.ShortTag() {
	case "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp":
		return true
	}
	return false
}

// parseDecimal reads an optionally signed decimal integer, with optional
// underscores between digits.
func parseDecimal(s string) (int64, error) {
	bad := func(why string) error {
		return fmt.Errorf("must be a whole number in decimal digits, got %s%s", limitLen(s, 40), why)
	}
	t := strings.TrimLeft(s, "+-")
	if len(s)-len(t) > 1 || t == "" {
		return 0, bad("")
	}
	digits := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c >= '0' && c <= '9':
			digits = append(digits, c)
		case c == '_' && i > 0 && i < len(t)-1 && t[i-1] != '_':
		default:
			return 0, bad("")
		}
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, bad(" (a leading zero would make YAML read it as octal; remove it)")
	}
	i, err := strconv.ParseInt(s[:len(s)-len(t)]+string(digits), 10, 64)
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

// suggest returns the field of want closest to name, if it is close.
func suggest(name string, want []string) string {
	if len(name) > 64 {
		return ""
	}
	best, bestD := "", 3
	for _, w := range want {
		if d := distance(strings.ToLower(name), w); d < bestD {
			best, bestD = w, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// join appends a key to a field path: a dot and the key when the key is
// a name without a dot ([A-Za-z0-9_-]), else the key quoted in brackets
// (and cut short).
func join(field, key string) string {
	if names.Valid(key, MaxNameLen, "") && !strings.Contains(key, ".") {
		if field == "" {
			return key
		}
		return field + "." + key
	}
	return field + "[" + strconv.Quote(limitLen(key, 48)) + "]"
}

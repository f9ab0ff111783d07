package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/throttle"
)

// A policy file is read in two steps. The YAML library decodes it into the
// structs below (file, queueFile, downstreamFile, tenantFile), whose values
// are small types that keep where they are written and what is wrong with
// them; then a checker turns those into a Config, reporting every problem
// with its place and field path.
//
// The library reports unknown fields and duplicate keys as text with a line
// but no column or field, and gives up on a mapping with a duplicate key;
// each mapping therefore looks at its own keys first (mapping.pairs) and
// hands the library only the ones it knows, once each.

// Bounds on the work of decoding, so that a small file of aliases cannot
// make it slow. The library has a bound of its own ("excessive aliasing"),
// but it counts within one decoder, and each entry here is decoded by its
// own.
const (
	// nodeBudget is the most nodes a document may have once its aliases
	// and merge keys are expanded. A larger file gets two per byte: a
	// file without aliases never needs that many.
	nodeBudget = 1_000_000
	// maxMergedKeys bounds the keys of a mapping that a merge key (<<)
	// brings in: the library compares each key of it with every other.
	maxMergedKeys = 1000
)

// Field names of each part of the file, in the order of the documentation.
var (
	topFields        = []string{"queue", "downstreams", "tenants"}
	queueFields      = []string{"name", "bound", "tenant_bound", "prefetch", "max_payload", "retention"}
	downstreamFields = []string{"base_url", "rate", "per", "burst", "also", "max_wait", "concurrency", "lease", "per_tenant", "timeout", "headers"}
	rateFields       = []string{"rate", "per", "burst", "counts"}
	tenantFields     = []string{"algorithm", "limit", "period", "burst", "weight", "class"}
)

// file is a policy file as written.
type file struct {
	mapping     `yaml:"-"`
	Queue       *queueFile              `yaml:"queue"`
	Downstreams entries[downstreamFile] `yaml:"downstreams"`
	Tenants     entries[tenantFile]     `yaml:"tenants"`
	Unknown     map[string]yaml.Node    `yaml:",inline"`

	budget int  // nodeBudget, or less in tests
	found  bool // the document is not empty or null
}

// UnmarshalYAML decodes the document's root node, once its aliases are
// known to expand to a reasonable size.
func (f *file) UnmarshalYAML(n *yaml.Node) error {
	f.found = true
	x := expansion{limit: f.budget, sizes: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	if x.size(n, false); x.problem != nil {
		f.skip = true
		f.issues = append(f.issues, *x.problem)
		return nil
	}
	type plain file
	f.decode(n, (*plain)(f), &f.Unknown, topFields)
	return nil
}

// queueFile is the queue section as written.
type queueFile struct {
	mapping     `yaml:"-"`
	Name        text                 `yaml:"name"`
	Bound       integer              `yaml:"bound"`
	TenantBound integer              `yaml:"tenant_bound"`
	Prefetch    integer              `yaml:"prefetch"`
	MaxPayload  size                 `yaml:"max_payload"`
	Retention   duration             `yaml:"retention"`
	Unknown     map[string]yaml.Node `yaml:",inline"`
}

// UnmarshalYAML decodes the queue section.
func (q *queueFile) UnmarshalYAML(n *yaml.Node) error {
	type plain queueFile
	q.decode(n, (*plain)(q), &q.Unknown, queueFields)
	return nil
}

// downstreamFile is one entry of the downstreams section as written.
type downstreamFile struct {
	mapping     `yaml:"-"`
	BaseURL     text                 `yaml:"base_url"`
	Rate        integer              `yaml:"rate"`
	Per         duration             `yaml:"per"`
	Burst       integer              `yaml:"burst"`
	Also        rates                `yaml:"also"`
	MaxWait     duration             `yaml:"max_wait"`
	Concurrency integer              `yaml:"concurrency"`
	Lease       duration             `yaml:"lease"`
	PerTenant   boolean              `yaml:"per_tenant"`
	Timeout     duration             `yaml:"timeout"`
	Headers     entries[text]        `yaml:"headers"`
	Unknown     map[string]yaml.Node `yaml:",inline"`
}

// UnmarshalYAML decodes one downstream.
func (d *downstreamFile) UnmarshalYAML(n *yaml.Node) error {
	type plain downstreamFile
	d.decode(n, (*plain)(d), &d.Unknown, downstreamFields)
	return nil
}

// rates is a downstream's also list as written.
type rates struct {
	leaf
	items []rateFile
}

// UnmarshalYAML reads a list of rates. Each item is decoded here, null
// items too (the library would skip them), so that each reports its own
// problems.
func (r *rates) UnmarshalYAML(n *yaml.Node) error {
	r.at, r.set = spotOf(n), true
	if n.Kind != yaml.SequenceNode {
		r.bad = "must be a list of rates such as [{rate: 1000, per: 1h}], got " + describe(n)
		return nil
	}
	for _, it := range n.Content {
		var f rateFile
		f.decodeRate(deref(it))
		r.items = append(r.items, f)
	}
	return nil
}

// rateFile is one item of a downstream's also list as written.
type rateFile struct {
	mapping `yaml:"-"`
	Rate    integer              `yaml:"rate"`
	Per     duration             `yaml:"per"`
	Burst   integer              `yaml:"burst"`
	Counts  text                 `yaml:"counts"`
	Unknown map[string]yaml.Node `yaml:",inline"`
}

// decodeRate decodes one rate of an also list.
func (r *rateFile) decodeRate(n *yaml.Node) {
	type plain rateFile
	r.decode(n, (*plain)(r), &r.Unknown, rateFields)
}

// tenantFile is one entry of the tenants section as written.
type tenantFile struct {
	mapping   `yaml:"-"`
	Algorithm text                 `yaml:"algorithm"`
	Limit     integer              `yaml:"limit"`
	Period    duration             `yaml:"period"`
	Burst     integer              `yaml:"burst"`
	Weight    integer              `yaml:"weight"`
	Class     text                 `yaml:"class"`
	Unknown   map[string]yaml.Node `yaml:",inline"`
}

// UnmarshalYAML decodes one tenant.
func (t *tenantFile) UnmarshalYAML(n *yaml.Node) error {
	type plain tenantFile
	t.decode(n, (*plain)(t), &t.Unknown, tenantFields)
	return nil
}

// entries is a mapping from names to T, in the order of the file, with
// where each name is written.
type entries[T any] struct {
	mapping
	list []entry[T]
}

type entry[T any] struct {
	name string
	at   spot // the key
	val  T
}

// UnmarshalYAML decodes each entry; the entries that merge keys bring in
// come after the file's own, and only for names it does not have.
func (e *entries[T]) UnmarshalYAML(n *yaml.Node) error {
	own, sources := e.pairs(n)
	for _, p := range own {
		ent := entry[T]{name: p.name, at: spotOf(p.key)}
		e.decodeNode(p.val, &ent.val)
		e.list = append(e.list, ent)
	}
	if len(sources) == 0 {
		return nil
	}
	var merged map[string]T
	e.decodeNode(withMerge(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, sources), &merged)
	for _, name := range slices.Sorted(maps.Keys(merged)) {
		k, ok := e.keys[name]
		if ok && !k.merged {
			continue
		}
		if !ok {
			k.key = e.at
		}
		e.list = append(e.list, entry[T]{name: name, at: k.key, val: merged[name]})
	}
	return nil
}

// spot is where a node is written: line and column, from 1.
type spot struct{ line, col int }

func spotOf(n *yaml.Node) spot { return spot{n.Line, n.Column} }

// issue is a problem found while decoding. Its field is relative to the
// mapping that found it (see under).
type issue struct {
	at    spot
	field string
	msg   string
}

// mapping is what each decoded mapping keeps besides its fields: where it
// and its keys are written, and the problems found in its keys.
type mapping struct {
	at     spot
	keys   map[string]keyAt
	issues []issue
	skip   bool // not decoded: not a mapping, or too large once expanded
}

// keyAt is where a key and its value are written. merged marks a key that
// a merge key (<<) brings in.
type keyAt struct {
	key, val spot
	merged   bool
}

// pair is one key of a mapping, with its value.
type pair struct {
	name     string
	key, val *yaml.Node
}

func (m *mapping) add(at spot, field, format string, args ...any) {
	m.issues = append(m.issues, issue{at, field, fmt.Sprintf(format, args...)})
}

// pairs checks the keys of n. It returns the pairs whose keys are plain,
// usable and given once, and the mappings that n's merge keys (<<) bring
// in, leaving out those with a key that the library would refuse. It
// notes where every key is written, also those that merge keys bring in.
func (m *mapping) pairs(n *yaml.Node) (own []pair, sources []*yaml.Node) {
	m.at, m.keys = spotOf(n), map[string]keyAt{}
	if n.Kind != yaml.MappingNode {
		m.skip = true
		m.add(m.at, "", "must be a mapping of keys to values, got %s", describe(n))
		return nil, nil
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			merges = append(merges, v)
			continue
		}
		name, ok := m.keyName(k)
		if !ok {
			continue
		}
		if prev, dup := m.keys[name]; dup {
			m.add(spotOf(k), join("", name), "defined twice: first at line %d, again at line %d", prev.key.line, k.Line)
			continue
		}
		m.keys[name] = keyAt{key: spotOf(k), val: spotOf(v)}
		own = append(own, pair{name, k, v})
	}
	for _, v := range merges {
		srcs, _ := m.mergeSources(v)
		for _, src := range srcs {
			keys := map[string]keyAt{}
			if !m.merged(src, keys) {
				continue
			}
			sources = append(sources, src)
			for name, k := range keys {
				if _, seen := m.keys[name]; !seen {
					m.keys[name] = k
				}
			}
		}
	}
	return own, sources
}

// merged notes in keys where the keys of src, a mapping that a merge key
// brings in, are written, and those of the mappings it merges in turn (the
// document has no merge cycles: expansion refuses them). It reports
// whether all their keys and merge keys are usable.
func (m *mapping) merged(src *yaml.Node, keys map[string]keyAt) bool {
	ok := true
	lines := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		if isMerge(k) {
			merges = append(merges, v)
			continue
		}
		name, good := m.keyName(k)
		switch {
		case !good:
			ok = false
		case lines[name] > 0:
			m.add(spotOf(k), join("", name), "defined twice in a merged mapping: first at line %d, again at line %d", lines[name], k.Line)
			ok = false
		default:
			lines[name] = k.Line
			if _, seen := keys[name]; !seen {
				keys[name] = keyAt{key: spotOf(k), val: spotOf(v), merged: true}
			}
		}
	}
	for _, v := range merges {
		srcs, good := m.mergeSources(v)
		ok = ok && good
		for _, s := range srcs {
			ok = m.merged(s, keys) && ok
		}
	}
	return ok
}

// mergeSources returns the mappings that the value of a merge key names:
// a mapping, or a list of them, each perhaps an alias. ok is false when
// the value names anything else.
func (m *mapping) mergeSources(v *yaml.Node) (out []*yaml.Node, ok bool) {
	items, where := []*yaml.Node{v}, ""
	if d := deref(v); d.Kind == yaml.SequenceNode {
		items, where = d.Content, " in the list"
	}
	ok = true
	for _, it := range items {
		if d := deref(it); d.Kind == yaml.MappingNode {
			out = append(out, d)
		} else {
			m.add(spotOf(it), "", "a merge key (<<) takes a mapping or a list of mappings, got %s%s", describe(d), where)
			ok = false
		}
	}
	return out, ok
}

// keyName returns the text of a mapping key.
func (m *mapping) keyName(k *yaml.Node) (string, bool) {
	v := deref(k)
	switch {
	case v.Kind != yaml.ScalarNode:
		m.add(spotOf(k), "", "keys must be plain values, got %s", describe(v))
	case v.ShortTag() == "!!null":
		m.add(spotOf(k), "", "a key must not be null (quote it to use %q)", v.Value)
	case !standardTag(v):
		m.add(spotOf(k), "", "unsupported tag %s on a key", v.ShortTag())
	default:
		return v.Value, true
	}
	return "", false
}

// decode decodes the mapping n into v, which points to a struct whose
// fields are named by known and which has an inline map, *unknown, for the
// keys that are not. The library sees only the known keys and the merge
// keys: n's own unknown keys are reported here, and those that merge keys
// bring in once the library has put them into *unknown.
func (m *mapping) decode(n *yaml.Node, v any, unknown *map[string]yaml.Node, known []string) {
	own, sources := m.pairs(n)
	if m.skip {
		return
	}
	clean := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	for _, p := range own {
		if slices.Contains(known, p.name) {
			clean.Content = append(clean.Content, p.key, p.val)
		} else {
			m.unknown(p.name, spotOf(p.key), known)
		}
	}
	m.decodeNode(withMerge(clean, sources), v)
	for name, val := range *unknown {
		k, ok := m.keys[name]
		switch {
		case ok && !k.merged:
			continue // reported above
		case !ok:
			k.key = spotOf(&val)
		}
		m.unknown(name, k.key, known)
	}
}

// unknown reports a key that is none of known, suggesting the closest.
func (m *mapping) unknown(name string, at spot, known []string) {
	if s := suggest(name, known); s != "" {
		m.add(at, join("", name), "unknown field; did you mean %q?", s)
		return
	}
	m.add(at, join("", name), "unknown field; expected one of %s", strings.Join(known, ", "))
}

// decodeNode decodes n into v with the library, keeping its complaints.
// With the keys checked beforehand and values that take any node, what is
// left for it to refuse lies in the mappings that merge keys bring in.
func (m *mapping) decodeNode(n *yaml.Node, v any) {
	err := n.Decode(v)
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te):
		for _, msg := range te.Errors {
			m.add(m.at, "", "%s", msg)
		}
	case err != nil:
		m.add(m.at, "", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
}

var mergeKey = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!merge", Value: "<<"}

// withMerge adds to the mapping n one merge key for all of sources.
func withMerge(n *yaml.Node, sources []*yaml.Node) *yaml.Node {
	if len(sources) > 0 {
		n.Content = append(n.Content, mergeKey, &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: sources})
	}
	return n
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge"
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// expansion measures a document with its aliases expanded. It stops at the
// first alias that names a node containing it, at the first merge key that
// brings in more than maxMergedKeys keys, and once the size passes limit.
type expansion struct {
	limit   int
	sizes   map[*yaml.Node]int  // anchored nodes measured
	open    map[*yaml.Node]bool // anchored nodes being measured
	path    []string            // the keys leading to the node measured
	problem *issue
}

// size returns the number of nodes of n expanded; merge tells that n is
// the value of a merge key.
func (x *expansion) size(n *yaml.Node, merge bool) int {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		if x.open[n.Alias] {
			if merge {
				x.fail(n, "a merge key (<<) merges a mapping into itself")
			} else {
				x.fail(n, "an alias names a mapping or list that contains it")
			}
			return 0
		}
		n = n.Alias
	}
	if merge {
		items := []*yaml.Node{n}
		if n.Kind == yaml.SequenceNode {
			items = n.Content
		}
		for _, it := range items {
			if keys := len(deref(it).Content) / 2; deref(it).Kind == yaml.MappingNode && keys > maxMergedKeys {
				x.fail(it, fmt.Sprintf("a merge key (<<) may bring in at most %d keys, got %d", maxMergedKeys, keys))
				return 0
			}
		}
	}
	if s, ok := x.sizes[n]; ok {
		return s
	}
	if n.Anchor != "" {
		x.open[n] = true
	}
	total := 1
	for i, c := range n.Content {
		mergeValue := false
		if n.Kind == yaml.MappingNode && i%2 == 1 {
			k := n.Content[i-1]
			if mergeValue = isMerge(k); !mergeValue {
				x.path = append(x.path, deref(k).Value)
			}
		}
		total = min(total+x.size(c, mergeValue || merge && n.Kind == yaml.SequenceNode), x.limit+1)
		if n.Kind == yaml.MappingNode && i%2 == 1 && !mergeValue {
			x.path = x.path[:len(x.path)-1]
		}
		if x.problem == nil && total > x.limit {
			x.fail(c, "the file is too large once its aliases and merge keys are expanded")
		}
		if x.problem != nil {
			return total
		}
	}
	if n.Anchor != "" {
		delete(x.open, n)
		x.sizes[n] = total
	}
	return total
}

func (x *expansion) fail(n *yaml.Node, msg string) {
	if x.problem != nil {
		return
	}
	field := ""
	for _, k := range x.path {
		field = join(field, k)
	}
	x.problem = &issue{at: spotOf(n), field: field, msg: msg}
}

// leaf is what each value keeps besides the value: where it is written,
// whether it is, and why it cannot be used, if it cannot.
type leaf struct {
	at  spot
	set bool
	bad string
}

// scalar notes n's place; it reports whether n is a single value with a
// standard tag. (The library does not call UnmarshalYAML for null values:
// the checker finds them by their keys.)
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
	switch n.ShortTag() {
	case "!!int":
	case "!!str":
		m := sizePattern.FindStringSubmatch(strings.TrimSpace(n.Value))
		if m == nil {
			s.bad = "must be a size such as 65536, 512KiB or 1MiB, got " + describe(n)
			return nil
		}
		digits, shift = m[1], map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20}[m[2]]
	default:
		s.bad = "must be a size such as 65536, 512KiB or 1MiB, got " + describe(n)
		return nil
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
		q := s
		if len(q) > 40 {
			q = q[:40] + "…"
		}
		return fmt.Errorf("must be a whole number in decimal digits, got %s%s", q, why)
	}
	t := s
	sign := ""
	if t != "" && (t[0] == '+' || t[0] == '-') {
		sign, t = t[:1], t[1:]
	}
	if t == "" {
		return 0, bad("")
	}
	digits := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
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
	i, err := strconv.ParseInt(sign+string(digits), 10, 64)
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
	s := v.Value
	if len(s) > 40 {
		s = strings.ToValidUTF8(s[:40], "") + "…"
	}
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
	q := key
	if len(q) > 48 {
		q = strings.ToValidUTF8(q[:48], "") + "…"
	}
	return field + "[" + strconv.Quote(q) + "]"
}

// under puts rel, a path made by join from "", under path.
func under(path, rel string) string {
	switch {
	case rel == "":
		return path
	case path == "" || rel[0] == '[':
		return path + rel
	}
	return path + "." + rel
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode reads data, one YAML document, into a Config. budget bounds the
// nodes of the document with its aliases expanded.
func decode(data []byte, budget int) (*Config, ErrorList) {
	c := &checker{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	f := &file{budget: budget}
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		c.yamlError(err)
		return nil, c.errs
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		c.yamlError(err)
		return nil, c.errs
	default:
		at := &next
		if len(next.Content) > 0 {
			at = next.Content[0]
		}
		c.add(spotOf(at), "", nil, "a policy file holds one YAML document; remove the second one (after ---)")
		return nil, c.errs
	}
	if !f.found {
		c.add(spot{line: 1}, "queue.bound", nil, "required; the file is empty or null")
		return nil, c.errs
	}
	cfg := c.config(f)
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	return cfg, nil
}

// checker turns a decoded file into a Config, collecting its problems.
type checker struct {
	errs ErrorList
}

func (c *checker) add(at spot, field string, cause error, format string, args ...any) {
	c.errs = append(c.errs, &Error{Line: max(at.line, 1), Column: at.col, Field: field, Msg: fmt.Sprintf(format, args...), Err: cause})
}

func (c *checker) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	at := spot{}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if l, convErr := strconv.Atoi(m[1]); convErr == nil {
			at.line, msg = l, m[2]
		}
	}
	c.add(at, "", err, "not valid YAML: %s", msg)
}

// mapping reports the problems m found in its keys, its fields being
// under path; false when m has no fields to check.
func (c *checker) mapping(m *mapping, path string) bool {
	for _, is := range m.issues {
		c.add(is.at, under(path, is.field), nil, "%s", is.msg)
	}
	return !m.skip
}

// section checks the values of one mapping.
type section struct {
	c    *checker
	m    *mapping
	path string
}

// value reports why the value of key name cannot be used, if it cannot;
// false also when the key is absent.
func (s section) value(name string, l *leaf) bool {
	switch {
	case l.bad != "":
		s.c.add(l.at, join(s.path, name), nil, "%s", l.bad)
	case !l.set:
		if k, ok := s.m.keys[name]; ok {
			s.c.add(k.val, join(s.path, name), nil, "has no value")
		}
	default:
		return true
	}
	return false
}

// has reports whether the mapping has key name, usable or not.
func (s section) has(name string) bool {
	_, ok := s.m.keys[name]
	return ok
}

func (s section) text(name string, v *text) (string, bool) {
	return v.v, s.value(name, &v.leaf)
}

func (s section) boolean(name string, v *boolean) (bool, bool) {
	return v.v, s.value(name, &v.leaf)
}

func (s section) integer(name string, v *integer, lo, hi int64) (int64, bool) {
	if !s.value(name, &v.leaf) {
		return 0, false
	}
	switch {
	case v.v < lo:
		s.c.add(v.at, join(s.path, name), nil, "must be at least %d, got %d", lo, v.v)
	case v.v > hi:
		s.c.add(v.at, join(s.path, name), nil, "must be at most %d, got %d", hi, v.v)
	default:
		return v.v, true
	}
	return 0, false
}

func (s section) duration(name string, v *duration, lo, hi time.Duration) (time.Duration, bool) {
	if !s.value(name, &v.leaf) {
		return 0, false
	}
	if v.v < lo || v.v > hi {
		s.c.add(v.at, join(s.path, name), nil, "must be between %s and %s, got %s", lo, hi, v.v)
		return 0, false
	}
	return v.v, true
}

func (s section) size(name string, v *size, lo, hi int64) (int64, bool) {
	if !s.value(name, &v.leaf) {
		return 0, false
	}
	switch {
	case v.v < lo:
		s.c.add(v.at, join(s.path, name), nil, "must be at least %s, got %s", formatSize(lo), v.text)
	case v.v > hi:
		s.c.add(v.at, join(s.path, name), nil, "must be at most %s, got %s", formatSize(hi), v.text)
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

// policyField is the key and value in the file of a Policy field.
type policyField struct {
	key string
	val *leaf
}

// policy reports err, from algorithms.Policy.Validate, at the value of the
// field it names, or at the entry's key (at) when the file has no value
// for it.
func (c *checker) policy(err error, path string, at spot, fields map[string]policyField) {
	field, msg := path, err.Error()
	var fe *algorithms.FieldError
	if errors.As(err, &fe) {
		msg = fe.Msg
		if f, ok := fields[fe.Field]; ok {
			field = join(path, f.key)
			if f.val.set {
				at = f.val.at
			}
		}
	}
	c.add(at, field, err, "%s", msg)
}

func (c *checker) config(f *file) *Config {
	cfg := &Config{Downstreams: map[string]Downstream{}, Tenants: map[string]Tenant{}}
	if !c.mapping(&f.mapping, "") {
		return cfg
	}
	cfg.Queue = c.queue(f)
	c.downstreams(&f.Downstreams, cfg.Downstreams)
	c.tenants(&f.Tenants, cfg.Tenants)
	return cfg
}

func (c *checker) queue(f *file) Queue {
	q := Queue{Name: DefaultQueueName, Prefetch: DefaultPrefetch, MaxPayload: DefaultMaxPayload, Retention: DefaultRetention}
	key, ok := f.keys["queue"]
	if !ok {
		c.add(f.at, "queue.bound", nil, "required; the file has no queue section")
		return q
	}
	qf := f.Queue
	if qf == nil {
		qf = &queueFile{} // queue: with no value
	}
	s := section{c, &qf.mapping, "queue"}
	if !c.mapping(s.m, s.path) {
		return q
	}
	if v, ok := s.text("name", &qf.Name); ok {
		if names.Valid(v, MaxNameLen, "") {
			q.Name = v
		} else {
			c.add(qf.Name.at, "queue.name", nil, "must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -, got %s", MaxNameLen, qf.Name.desc)
		}
	}
	var boundOK, tenantBoundOK bool
	q.Bound, boundOK = s.integer("bound", &qf.Bound, 1, MaxBound)
	q.TenantBound, tenantBoundOK = s.integer("tenant_bound", &qf.TenantBound, 0, MaxBound)
	if v, ok := s.integer("prefetch", &qf.Prefetch, 1, MaxPrefetch); ok {
		q.Prefetch = int(v)
	}
	if v, ok := s.size("max_payload", &qf.MaxPayload, 1, MaxPayloadLimit); ok {
		q.MaxPayload = v
	}
	if v, ok := s.duration("retention", &qf.Retention, MinRetention, MaxRetention); ok {
		q.Retention = v
	}
	if !s.has("bound") {
		c.add(key.key, "queue.bound", nil, "required: the most jobs waiting, at least 1")
	}
	if boundOK && tenantBoundOK && q.TenantBound > q.Bound { // an absent tenant_bound is 0
		c.add(qf.TenantBound.at, "queue.tenant_bound", nil, "must be at most queue.bound (%d), got %d", q.Bound, q.TenantBound)
	}
	return q
}

func (c *checker) downstreams(e *entries[downstreamFile], out map[string]Downstream) {
	if !c.mapping(&e.mapping, "downstreams") {
		return
	}
	bases := map[string]entry[downstreamFile]{} // normalised base URL -> the downstream that has it
	for _, ent := range e.list {
		path := join("downstreams", ent.name)
		if !names.Valid(ent.name, MaxNameLen, "") {
			c.add(ent.at, path, nil, "a downstream's name must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -", MaxNameLen)
			continue
		}
		d, ok := c.downstream(ent, path)
		if !ok {
			continue
		}
		if d.BaseURL != nil {
			b := originOf(d.BaseURL) + basePath(d.BaseURL)
			if prev, dup := bases[b]; dup {
				c.add(ent.val.BaseURL.at, path+".base_url", nil, "the same base_url as downstreams.%s (line %d); a URL must belong to one downstream", prev.name, prev.at.line)
				continue
			}
			bases[b] = ent
		}
		out[ent.name] = d
	}
}

func (c *checker) downstream(ent entry[downstreamFile], path string) (Downstream, bool) {
	df := &ent.val
	s := section{c, &df.mapping, path}
	before := len(c.errs)
	if !c.mapping(s.m, path) {
		return Downstream{}, false
	}
	d := Downstream{
		Name:    ent.name,
		Limit:   throttle.Limit{Name: ent.name, Per: DefaultPer, Burst: DefaultBurst, MaxWait: DefaultMaxWait},
		Timeout: DefaultTimeout,
	}
	if v, ok := s.text("base_url", &df.BaseURL); ok {
		u, err := parseBaseURL(v)
		if err != nil {
			c.add(df.BaseURL.at, path+".base_url", nil, "%v", err)
		}
		d.BaseURL = u
	}
	d.Limit.Rate, d.Limit.Per, d.Limit.Burst = c.pace(s, &df.Rate, &df.Per, &df.Burst)
	if s.value("also", &df.Also.leaf) {
		d.Limit.Also = c.also(&df.Also, path+".also")
	}
	if w, ok := s.duration("max_wait", &df.MaxWait, 0, MaxDuration); ok {
		d.Limit.MaxWait = w
		if w == 0 {
			d.Limit.MaxWait = -1 // only a slot due now
		}
	}
	conc, _ := s.integer("concurrency", &df.Concurrency, 0, MaxConcurrency)
	lease := DefaultLease
	if l, ok := s.duration("lease", &df.Lease, time.Millisecond, MaxDuration); ok {
		lease = l
	}
	d.PerTenant, _ = s.boolean("per_tenant", &df.PerTenant)
	if t, ok := s.duration("timeout", &df.Timeout, time.Millisecond, MaxDuration); ok {
		d.Timeout = t
	}
	if s.has("headers") {
		d.Headers = c.headers(&df.Headers, path+".headers")
	}
	if !s.has("rate") {
		c.add(ent.at, path+".rate", nil, "required: the units allowed per `per`, at least 1")
	}
	if len(c.errs) > before {
		return d, false
	}
	if !c.paceValid(path, ent.at, d.Limit.Rate, d.Limit.Per, d.Limit.Burst, &df.Rate, &df.Per, &df.Burst) {
		return d, false
	}
	if conc > 0 {
		d.Concurrency = &throttle.Concurrency{Name: ent.name, Max: conc, Lease: lease}
	}
	return d, true
}

// headers checks a downstream's headers: names that are HTTP tokens, given
// once whatever their case, and values, once each ${VAR} in them is
// replaced by the environment variable's value, without control
// characters but tab. Messages name the header and the variable, never a
// value. The names are returned canonical (http.CanonicalHeaderKey).
func (c *checker) headers(e *entries[text], path string) map[string]string {
	if !c.mapping(&e.mapping, path) {
		return nil
	}
	s := section{c, &e.mapping, path}
	out := make(map[string]string, len(e.list))
	seen := map[string]string{} // canonical name -> the name as written
	for _, ent := range e.list {
		v, ok := s.text(ent.name, &ent.val)
		if !ok {
			continue
		}
		field := join(path, ent.name)
		if downstream.CheckRequest("", map[string]string{ent.name: ""}) != nil {
			c.add(ent.at, field, nil, "a header name must be an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)")
			continue
		}
		name := http.CanonicalHeaderKey(ent.name)
		if prev, dup := seen[name]; dup {
			c.add(ent.at, field, nil, "the same header as %s (names are not case-sensitive)", join(path, prev))
			continue
		}
		seen[name] = ent.name
		val, err := expandEnv(v)
		if err != nil {
			c.add(ent.val.at, field, nil, "%v", err)
			continue
		}
		if downstream.CheckRequest("", map[string]string{name: val}) != nil {
			c.add(ent.val.at, field, nil, "the value, once expanded, holds a control character other than tab")
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
		if !envName(name) {
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

// envName reports whether s is a portable environment variable name.
func envName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// pace reads the rate, per and burst of a downstream or of one of its
// also rates, each defaulted when absent or unusable.
func (c *checker) pace(s section, rate *integer, per *duration, burst *integer) (int64, time.Duration, int64) {
	r, _ := s.integer("rate", rate, 1, algorithms.MaxLimit)
	p, b := DefaultPer, int64(DefaultBurst)
	if v, ok := s.duration("per", per, algorithms.MinPeriod, algorithms.MaxPeriod); ok {
		if v%time.Microsecond != 0 {
			c.add(per.at, join(s.path, "per"), nil, "must be a whole number of microseconds, got %s", v)
		}
		p = v
	}
	if v, ok := s.integer("burst", burst, 1, algorithms.MaxLimit); ok {
		b = v
	}
	return r, p, b
}

// paceValid reports whether a rate, per and burst that are each fine are
// fine together: the throttle checks them as a GCRA policy, which may
// find them too fine-grained to count exactly. The problem is reported at
// the field it names, or at (path, at).
func (c *checker) paceValid(path string, at spot, rate int64, per time.Duration, burst int64, rf *integer, pf *duration, bf *integer) bool {
	pol := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: rate, Period: per, Burst: burst}
	if err := pol.Validate(); err != nil {
		c.policy(err, path, at, map[string]policyField{
			"limit": {"rate", &rf.leaf}, "period": {"per", &pf.leaf}, "burst": {"burst", &bf.leaf},
		})
		return false
	}
	return true
}

// also checks a downstream's also list, its items under path.
func (c *checker) also(l *rates, path string) []throttle.Rate {
	if len(l.items) > throttle.MaxAlso {
		c.add(l.at, path, nil, "may list at most %d rates, got %d", throttle.MaxAlso, len(l.items))
		return nil
	}
	var out []throttle.Rate
	for i := range l.items {
		if r, ok := c.rate(&l.items[i], fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, r)
		}
	}
	return out
}

// rate checks one item of an also list.
func (c *checker) rate(rf *rateFile, path string) (throttle.Rate, bool) {
	s := section{c, &rf.mapping, path}
	before := len(c.errs)
	if !c.mapping(s.m, path) {
		return throttle.Rate{}, false
	}
	var r throttle.Rate
	r.Rate, r.Per, r.Burst = c.pace(s, &rf.Rate, &rf.Per, &rf.Burst)
	if v, ok := s.text("counts", &rf.Counts); ok {
		switch v {
		case "cost":
		case "calls":
			r.Counts = throttle.CountsCalls
		default:
			c.add(rf.Counts.at, path+".counts", nil, "must be cost (the call's cost, the default) or calls (1 a call), got %s", rf.Counts.desc)
		}
	}
	if !s.has("rate") {
		c.add(rf.at, path+".rate", nil, "required: the units allowed per `per`, at least 1")
	}
	if len(c.errs) > before {
		return r, false
	}
	return r, c.paceValid(path, rf.at, r.Rate, r.Per, r.Burst, &rf.Rate, &rf.Per, &rf.Burst)
}

func (c *checker) tenants(e *entries[tenantFile], out map[string]Tenant) {
	if !c.mapping(&e.mapping, "tenants") {
		return
	}
	for _, ent := range e.list {
		path := join("tenants", ent.name)
		switch {
		case ent.name == "":
			c.add(ent.at, path, nil, "a tenant id must not be empty")
		case len(ent.name) > MaxTenantIDLen:
			c.add(ent.at, path, nil, "a tenant id must be at most %d bytes, got %d", MaxTenantIDLen, len(ent.name))
		default:
			if t, ok := c.tenant(ent, path); ok {
				out[ent.name] = t
			}
		}
	}
}

func (c *checker) tenant(ent entry[tenantFile], path string) (Tenant, bool) {
	tf := &ent.val
	s := section{c, &tf.mapping, path}
	t := Tenant{ID: ent.name, Weight: DefaultWeight}
	before := len(c.errs)
	if !c.mapping(s.m, path) {
		return t, false
	}
	var pol algorithms.Policy
	alg, _ := s.text("algorithm", &tf.Algorithm)
	pol.Algorithm = algorithms.Algorithm(alg)
	pol.Limit, _ = s.integer("limit", &tf.Limit, math.MinInt64, math.MaxInt64)
	pol.Period, _ = s.duration("period", &tf.Period, 0, math.MaxInt64)
	pol.Burst, _ = s.integer("burst", &tf.Burst, math.MinInt64, math.MaxInt64)
	if w, ok := s.integer("weight", &tf.Weight, 1, MaxWeight); ok {
		t.Weight = int(w)
	}
	if class, ok := s.text("class", &tf.Class); ok {
		if names.Valid(class, 32, "") {
			t.Class = class
		} else {
			c.add(tf.Class.at, path+".class", nil, "use 1 to 32 bytes of [A-Za-z0-9_.-], got %q", limitLen(class, 40))
		}
	}
	if len(c.errs) > before {
		return t, false
	}
	if !s.has("algorithm") && !s.has("limit") && !s.has("period") && !s.has("burst") {
		return t, true // no admission policy
	}
	if err := pol.Validate(); err != nil {
		c.policy(err, path, ent.at, map[string]policyField{
			"algorithm": {"algorithm", &tf.Algorithm.leaf}, "limit": {"limit", &tf.Limit.leaf},
			"period": {"period", &tf.Period.leaf}, "burst": {"burst", &tf.Burst.leaf},
		})
		return t, false
	}
	t.Policy = &pol
	return t, true
}

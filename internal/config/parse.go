package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/throttle"
)

const (
	// nodeBudget bounds the key-value pairs visited, aliases and merge
	// keys expanded, so that a small file of aliases cannot make parsing
	// slow. A file of more bytes than this gets one step per byte: every
	// pair written out takes several bytes.
	nodeBudget = 1_000_000
	// maxMergeDepth bounds merge keys that merge mappings that merge.
	maxMergeDepth = 8
	// maxCollected bounds the problems kept while parsing.
	maxCollected = 1000
)

// Field names of each section, in the order of the documentation.
var (
	topFields        = []string{"queue", "downstreams", "tenants"}
	queueFields      = []string{"name", "bound", "tenant_bound", "prefetch", "max_payload", "retention"}
	downstreamFields = []string{"base_url", "rate", "per", "burst", "max_wait", "concurrency", "lease", "per_tenant", "timeout"}
	tenantFields     = []string{"algorithm", "limit", "period", "burst", "weight", "class"}
)

type parser struct {
	errs     ErrorList
	seen     map[string]bool // problems already reported
	dropped  int             // problems not kept, beyond maxCollected
	budget   int
	overflow bool
}

func newParser(size int) *parser {
	return &parser{budget: max(nodeBudget, size), seen: map[string]bool{}}
}

// add records a problem at n (which may be nil).
func (p *parser) add(n *yaml.Node, field string, cause error, format string, args ...any) {
	if p.overflow {
		return
	}
	if len(p.errs) >= maxCollected {
		p.dropped++
		return
	}
	p.keep(n, field, cause, format, args...)
}

// keep records a problem even beyond maxCollected.
func (p *parser) keep(n *yaml.Node, field string, cause error, format string, args ...any) {
	e := &Error{Field: field, Msg: fmt.Sprintf(format, args...), Err: cause}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	if e.Line == 0 {
		e.Line = 1
	}
	id := fmt.Sprintf("%d:%d:%s:%s", e.Line, e.Column, e.Field, e.Msg)
	if p.seen[id] {
		return
	}
	p.seen[id] = true
	p.errs = append(p.errs, e)
}

// spend takes one step of the budget; false once it is spent.
func (p *parser) spend(n *yaml.Node) bool {
	if p.budget > 0 {
		p.budget--
		return true
	}
	if !p.overflow {
		// The rest of the problems would be noise: report this one alone.
		p.overflow = true
		p.errs, p.dropped = nil, 0
		p.keep(n, "", nil, "the file is too large once its aliases and merge keys are expanded")
	}
	return false
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data as one YAML document and walks it.
func (p *parser) document(data []byte) *Config {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if err != nil && !errors.Is(err, io.EOF) {
		p.yamlError(err)
		return nil
	}
	if err == nil {
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case errors.Is(err, io.EOF):
		case err != nil:
			p.yamlError(err)
			return nil
		default:
			at := &next
			if len(next.Content) > 0 {
				at = next.Content[0]
			}
			p.add(at, "", nil, "a policy file holds one YAML document; remove the second one (after ---)")
			return nil
		}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == 0 || isNull(deref(root)) {
		p.add(&yaml.Node{Line: 1}, "queue.bound", nil, "required; the file is empty or null")
		return nil
	}
	return p.config(root)
}

func (p *parser) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	n := &yaml.Node{}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if l, convErr := strconv.Atoi(m[1]); convErr == nil {
			n.Line = l
			msg = m[2]
		}
	}
	p.add(n, "", err, "not valid YAML: %s", msg)
}

func (p *parser) config(root *yaml.Node) *Config {
	cfg := &Config{Downstreams: map[string]Downstream{}, Tenants: map[string]Tenant{}}
	pairs, ok := p.mapping(root, "")
	if !ok {
		return nil
	}
	var queueKey *yaml.Node
	for _, kv := range pairs {
		switch kv.name {
		case "queue":
			queueKey = kv.key
			cfg.Queue = p.queue(kv.key, kv.val)
		case "downstreams":
			p.downstreams(kv.val, cfg.Downstreams)
		case "tenants":
			p.tenants(kv.val, cfg.Tenants)
		default:
			p.unknown(kv, "", topFields)
		}
	}
	if queueKey == nil {
		at := root
		if at.Line == 0 {
			at = &yaml.Node{Line: 1}
		}
		p.add(at, "queue.bound", nil, "required; the file has no queue section")
	}
	return cfg
}

// pair is one key of a mapping with its value.
type pair struct {
	key, val *yaml.Node
	name     string
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 4; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// mapping returns the pairs of the mapping n: its own keys in the order of
// the file, then the keys its merge keys (<<) bring in that it does not
// have. A null n is an empty mapping. It reports keys that are not
// scalars, duplicate keys, and an n that is not a mapping (then ok is
// false).
func (p *parser) mapping(n *yaml.Node, field string) (pairs []pair, ok bool) {
	v := deref(n)
	if v == nil || isNull(v) {
		return nil, true
	}
	if v.Kind != yaml.MappingNode {
		p.add(n, field, nil, "must be a mapping of keys to values, got %s", describe(v))
		return nil, false
	}
	mc := &mergeCollector{seen: map[string]*yaml.Node{}, done: map[*yaml.Node]bool{v: true}}
	p.collect(v, field, mc, []*yaml.Node{v})
	return mc.pairs, true
}

// mergeCollector gathers the pairs of one mapping and of the mappings it
// merges.
type mergeCollector struct {
	pairs []pair
	seen  map[string]*yaml.Node // keys gathered so far
	done  map[*yaml.Node]bool   // mappings gathered already: merging one again adds nothing
}

// collect adds the pairs of m whose keys are not yet seen. path holds the
// mappings being collected, m last: m and those that merge it.
func (p *parser) collect(m *yaml.Node, field string, mc *mergeCollector, path []*yaml.Node) {
	depth := len(path) - 1
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !p.spend(k) {
			return
		}
		kd := deref(k)
		if kd != nil && kd.Kind == yaml.ScalarNode && kd.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		name, ok := p.keyName(k, field)
		if !ok {
			continue
		}
		if prev, dup := mc.seen[name]; dup {
			if depth == 0 {
				p.add(k, join(field, name), nil, "defined twice: first at line %d, again at line %d", prev.Line, k.Line)
			}
			continue
		}
		mc.seen[name] = k
		mc.pairs = append(mc.pairs, pair{key: k, val: v, name: name})
	}
	for _, mv := range merges {
		if depth >= maxMergeDepth {
			p.add(mv, field, nil, "merge keys (<<) nested more than %d deep", maxMergeDepth)
			return
		}
		src := deref(mv)
		var maps []*yaml.Node
		switch {
		case src != nil && src.Kind == yaml.MappingNode:
			maps = append(maps, src)
		case src != nil && src.Kind == yaml.SequenceNode:
			for _, it := range src.Content {
				if d := deref(it); d != nil && d.Kind == yaml.MappingNode {
					maps = append(maps, d)
				} else {
					p.add(it, field, nil, "a merge key (<<) takes a mapping or a list of mappings, got %s in the list", describe(d))
				}
			}
		default:
			p.add(mv, field, nil, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(src))
		}
		for _, sm := range maps {
			if slices.Contains(path, sm) {
				p.add(mv, field, nil, "a merge key (<<) merges a mapping into itself")
				continue
			}
			if mc.done[sm] {
				continue
			}
			mc.done[sm] = true
			p.collect(sm, field, mc, append(path[:len(path):len(path)], sm))
		}
	}
}

// keyName returns the text of a mapping key.
func (p *parser) keyName(k *yaml.Node, field string) (string, bool) {
	v := deref(k)
	if v == nil || v.Kind != yaml.ScalarNode {
		p.add(k, field, nil, "keys must be plain values, got %s", describe(v))
		return "", false
	}
	if isNull(v) {
		p.add(k, field, nil, "a key must not be null (quote it to use %q)", v.Value)
		return "", false
	}
	if !standardTag(v) {
		p.add(k, field, nil, "unsupported tag %s on a key", v.ShortTag())
		return "", false
	}
	return v.Value, true
}

func standardTag(v *yaml.Node) bool {
	switch v.ShortTag() {
	case "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp":
		return true
	}
	return false
}

// unknown reports a key that is not one of want.
func (p *parser) unknown(kv pair, field string, want []string) {
	if p.overflow {
		return
	}
	if len(p.errs) >= maxCollected {
		p.dropped++
		return
	}
	f := join(field, kv.name)
	if s := suggest(kv.name, want); s != "" {
		p.add(kv.key, f, nil, "unknown field; did you mean %q?", s)
		return
	}
	p.add(kv.key, f, nil, "unknown field; expected one of %s", strings.Join(want, ", "))
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
// made of [A-Za-z0-9_-], else the key quoted in brackets (and cut short).
func join(field, key string) string {
	plain := key != ""
	for i := 0; i < len(key) && plain; i++ {
		c := key[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if plain && len(key) <= MaxNameLen {
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

// describe names what a node is, for error messages.
func describe(v *yaml.Node) string {
	if v == nil {
		return "nothing"
	}
	switch v.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	case yaml.AliasNode:
		return "an alias"
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

// scalar returns the single value n, or reports why it is not one.
func (p *parser) scalar(n *yaml.Node, field string) (*yaml.Node, bool) {
	v := deref(n)
	switch {
	case v == nil || v.Kind != yaml.ScalarNode:
		p.add(n, field, nil, "must be a single value, got %s", describe(v))
		return nil, false
	case isNull(v):
		p.add(n, field, nil, "has no value")
		return nil, false
	case !standardTag(v):
		p.add(n, field, nil, "unsupported tag %s", v.ShortTag())
		return nil, false
	}
	return v, true
}

// text returns a value as it is written (strings, and values that YAML
// would read as numbers or booleans alike).
func (p *parser) text(n *yaml.Node, field string) (string, bool) {
	v, ok := p.scalar(n, field)
	if !ok {
		return "", false
	}
	return v.Value, true
}

// integer returns a whole number written in decimal digits.
func (p *parser) integer(n *yaml.Node, field string) (int64, bool) {
	v, ok := p.scalar(n, field)
	if !ok {
		return 0, false
	}
	if v.ShortTag() != "!!int" && v.ShortTag() != "!!float" {
		p.add(n, field, nil, "must be a whole number, got %s", describe(v))
		return 0, false
	}
	i, err := parseDecimal(v.Value)
	if err != nil {
		p.add(n, field, nil, "%v", err)
		return 0, false
	}
	return i, true
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

// intRange returns an integer between lo and hi.
func (p *parser) intRange(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	i, ok := p.integer(n, field)
	if !ok {
		return 0, false
	}
	switch {
	case i < lo:
		p.add(n, field, nil, "must be at least %d, got %d", lo, i)
		return 0, false
	case i > hi:
		p.add(n, field, nil, "must be at most %d, got %d", hi, i)
		return 0, false
	}
	return i, true
}

// duration returns a Go duration string ("1s", "500ms", "1m30s"), not
// negative.
func (p *parser) duration(n *yaml.Node, field string) (time.Duration, bool) {
	v, ok := p.scalar(n, field)
	if !ok {
		return 0, false
	}
	if v.ShortTag() == "!!int" || v.ShortTag() == "!!float" {
		p.add(n, field, nil, "a duration needs a unit, such as %q or %q; got %s", v.Value+"s", v.Value+"ms", describe(v))
		return 0, false
	}
	s := strings.TrimSpace(v.Value)
	if strings.IndexFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' || r == 'µ' || r == 'μ' }) < 0 {
		p.add(n, field, nil, "a duration needs a unit, such as \"10s\" or \"500ms\"; got %s", describe(v))
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.add(n, field, nil, "must be a duration such as \"10s\", \"500ms\" or \"1m30s\", got %s", describe(v))
		return 0, false
	}
	if d < 0 {
		p.add(n, field, nil, "must not be negative, got %s", d)
		return 0, false
	}
	return d, true
}

// durationRange returns a duration between lo and hi.
func (p *parser) durationRange(n *yaml.Node, field string, lo, hi time.Duration) (time.Duration, bool) {
	d, ok := p.duration(n, field)
	if !ok {
		return 0, false
	}
	if d < lo || d > hi {
		p.add(n, field, nil, "must be between %s and %s, got %s", lo, hi, d)
		return 0, false
	}
	return d, true
}

// boolean returns true or false.
func (p *parser) boolean(n *yaml.Node, field string) (bool, bool) {
	v, ok := p.scalar(n, field)
	if !ok {
		return false, false
	}
	if v.ShortTag() != "!!bool" {
		p.add(n, field, nil, "must be true or false, got %s", describe(v))
		return false, false
	}
	b, err := strconv.ParseBool(v.Value)
	if err != nil { // YAML 1.1 spellings (True, TRUE, ...) that ParseBool does not know
		b = strings.EqualFold(v.Value, "true")
	}
	return b, true
}

var sizePattern = regexp.MustCompile(`^([0-9][0-9_]*) ?(B|KiB|MiB)?$`)

// size returns a number of bytes: a whole number, or one with a B, KiB or
// MiB suffix.
func (p *parser) size(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	v, ok := p.scalar(n, field)
	if !ok {
		return 0, false
	}
	var bytes int64
	switch v.ShortTag() {
	case "!!int":
		i, err := parseDecimal(v.Value)
		if err != nil {
			p.add(n, field, nil, "%v", err)
			return 0, false
		}
		bytes = i
	case "!!str":
		m := sizePattern.FindStringSubmatch(strings.TrimSpace(v.Value))
		if m == nil {
			p.add(n, field, nil, "must be a size such as 65536, 512KiB or 1MiB, got %s", describe(v))
			return 0, false
		}
		i, err := parseDecimal(m[1])
		if err != nil {
			p.add(n, field, nil, "%v", err)
			return 0, false
		}
		shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20}[m[2]]
		if i > hi>>shift {
			p.add(n, field, nil, "must be at most %s, got %s", formatSize(hi), v.Value)
			return 0, false
		}
		bytes = i << shift
	default:
		p.add(n, field, nil, "must be a size such as 65536, 512KiB or 1MiB, got %s", describe(v))
		return 0, false
	}
	switch {
	case bytes < lo:
		p.add(n, field, nil, "must be at least %s, got %s", formatSize(lo), v.Value)
		return 0, false
	case bytes > hi:
		p.add(n, field, nil, "must be at most %s, got %s", formatSize(hi), v.Value)
		return 0, false
	}
	return bytes, true
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

// validName reports whether s is 1 to MaxNameLen bytes of [A-Za-z0-9_.-].
func validName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (p *parser) queue(key, val *yaml.Node) Queue {
	q := Queue{Name: DefaultQueueName, Prefetch: DefaultPrefetch, MaxPayload: DefaultMaxPayload, Retention: DefaultRetention}
	pairs, ok := p.mapping(val, "queue")
	if !ok {
		return q
	}
	var boundNode, tenantBoundNode *yaml.Node
	boundOK, tenantBoundOK := false, true
	for _, kv := range pairs {
		f := join("queue", kv.name)
		switch kv.name {
		case "name":
			if s, ok := p.text(kv.val, f); ok {
				if validName(s) {
					q.Name = s
				} else {
					p.add(kv.val, f, nil, "must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -, got %s", MaxNameLen, describe(deref(kv.val)))
				}
			}
		case "bound":
			boundNode = kv.val
			q.Bound, boundOK = p.intRange(kv.val, f, 1, MaxBound)
		case "tenant_bound":
			tenantBoundNode = kv.val
			q.TenantBound, tenantBoundOK = p.intRange(kv.val, f, 0, MaxBound)
		case "prefetch":
			if i, ok := p.intRange(kv.val, f, 1, MaxPrefetch); ok {
				q.Prefetch = int(i)
			}
		case "max_payload":
			if b, ok := p.size(kv.val, f, 1, MaxPayloadLimit); ok {
				q.MaxPayload = b
			}
		case "retention":
			if d, ok := p.durationRange(kv.val, f, MinRetention, MaxRetention); ok {
				q.Retention = d
			}
		default:
			p.unknown(kv, "queue", queueFields)
		}
	}
	if boundNode == nil {
		p.add(key, "queue.bound", nil, "required: the most jobs waiting, at least 1")
	}
	if boundOK && tenantBoundOK && q.TenantBound > q.Bound {
		p.add(tenantBoundNode, "queue.tenant_bound", nil, "must be at most queue.bound (%d), got %d", q.Bound, q.TenantBound)
	}
	return q
}

func (p *parser) downstreams(val *yaml.Node, out map[string]Downstream) {
	pairs, ok := p.mapping(val, "downstreams")
	if !ok {
		return
	}
	bases := map[string]pair{} // normalised base URL -> the downstream that has it
	for _, kv := range pairs {
		f := join("downstreams", kv.name)
		if !validName(kv.name) {
			p.add(kv.key, f, nil, "a downstream's name must be 1 to %d characters of A-Z, a-z, 0-9, _, . and -", MaxNameLen)
			continue
		}
		d, baseNode, ok := p.downstream(kv, f)
		if !ok {
			continue
		}
		if d.BaseURL != nil {
			b := originOf(d.BaseURL) + basePath(d.BaseURL)
			if prev, dup := bases[b]; dup {
				p.add(baseNode, f+".base_url", nil, "the same base_url as downstreams.%s (line %d); a URL must belong to one downstream", prev.name, prev.key.Line)
				continue
			}
			bases[b] = kv
		}
		out[kv.name] = d
	}
}

func (p *parser) downstream(kv pair, field string) (Downstream, *yaml.Node, bool) {
	d := Downstream{
		Name:    kv.name,
		Limit:   throttle.Limit{Name: kv.name, Per: DefaultPer, Burst: DefaultBurst, MaxWait: DefaultMaxWait},
		Timeout: DefaultTimeout,
	}
	pairs, ok := p.mapping(kv.val, field)
	if !ok {
		return d, nil, false
	}
	good := true
	check := func(ok bool) {
		good = good && ok
	}
	var baseNode, rateNode, perNode, burstNode *yaml.Node
	var conc int64
	lease := DefaultLease
	for _, f := range pairs {
		ff := join(field, f.name)
		switch f.name {
		case "base_url":
			baseNode = f.val
			s, ok := p.text(f.val, ff)
			if ok {
				u, err := parseBaseURL(s)
				if err != nil {
					p.add(f.val, ff, nil, "%v", err)
					ok = false
				}
				d.BaseURL = u
			}
			check(ok)
		case "rate":
			rateNode = f.val
			r, ok := p.intRange(f.val, ff, 1, algorithms.MaxLimit)
			d.Limit.Rate = r
			check(ok)
		case "per":
			perNode = f.val
			per, ok := p.durationRange(f.val, ff, algorithms.MinPeriod, algorithms.MaxPeriod)
			if ok && per%time.Microsecond != 0 {
				p.add(f.val, ff, nil, "must be a whole number of microseconds, got %s", per)
				ok = false
			}
			if ok {
				d.Limit.Per = per
			}
			check(ok)
		case "burst":
			burstNode = f.val
			b, ok := p.intRange(f.val, ff, 1, algorithms.MaxLimit)
			if ok {
				d.Limit.Burst = b
			}
			check(ok)
		case "max_wait":
			w, ok := p.durationRange(f.val, ff, 0, MaxDuration)
			if ok {
				d.Limit.MaxWait = w
				if w == 0 {
					d.Limit.MaxWait = -1 // only a slot due now
				}
			}
			check(ok)
		case "concurrency":
			c, ok := p.intRange(f.val, ff, 0, MaxConcurrency)
			conc = c
			check(ok)
		case "lease":
			l, ok := p.durationRange(f.val, ff, time.Millisecond, MaxDuration)
			if ok {
				lease = l
			}
			check(ok)
		case "per_tenant":
			b, ok := p.boolean(f.val, ff)
			d.PerTenant = b
			check(ok)
		case "timeout":
			t, ok := p.durationRange(f.val, ff, time.Millisecond, MaxDuration)
			if ok {
				d.Timeout = t
			}
			check(ok)
		default:
			p.unknown(f, field, downstreamFields)
			good = false
		}
	}
	if rateNode == nil {
		p.add(kv.key, field+".rate", nil, "required: the units allowed per `per`, at least 1")
		good = false
	}
	if !good {
		return d, baseNode, false
	}
	// The throttle checks its Limit as a GCRA policy; a rate and burst
	// that are each fine may still be too fine-grained together.
	pol := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: d.Limit.Rate, Period: d.Limit.Per, Burst: d.Limit.Burst}
	if err := pol.Validate(); err != nil {
		name, msg := splitPolicyError(err)
		at, f := kv.key, field
		switch name {
		case "limit":
			at, f = rateNode, field+".rate"
		case "period":
			at, f = perNode, field+".per"
		case "burst":
			at, f = burstNode, field+".burst"
		}
		if at == nil {
			at = kv.key
		}
		p.add(at, f, err, "%s", msg)
		return d, baseNode, false
	}
	if conc > 0 {
		d.Concurrency = &throttle.Concurrency{Name: kv.name, Max: conc, Lease: lease}
	}
	return d, baseNode, true
}

// splitPolicyError splits an algorithms.Policy.Validate error into the
// field it names and the rest of its message.
func splitPolicyError(err error) (field, msg string) {
	msg = strings.TrimPrefix(err.Error(), algorithms.ErrInvalidPolicy.Error()+": ")
	if i := strings.Index(msg, ": "); i > 0 && !strings.ContainsAny(msg[:i], " \t") {
		return msg[:i], msg[i+2:]
	}
	return "", msg
}

func (p *parser) tenants(val *yaml.Node, out map[string]Tenant) {
	pairs, ok := p.mapping(val, "tenants")
	if !ok {
		return
	}
	for _, kv := range pairs {
		f := join("tenants", kv.name)
		if kv.name == "" {
			p.add(kv.key, f, nil, "a tenant id must not be empty")
			continue
		}
		if len(kv.name) > MaxTenantIDLen {
			p.add(kv.key, f, nil, "a tenant id must be at most %d bytes, got %d", MaxTenantIDLen, len(kv.name))
			continue
		}
		if t, ok := p.tenant(kv, f); ok {
			out[kv.name] = t
		}
	}
}

func (p *parser) tenant(kv pair, field string) (Tenant, bool) {
	t := Tenant{ID: kv.name, Weight: DefaultWeight}
	pairs, ok := p.mapping(kv.val, field)
	if !ok {
		return t, false
	}
	var pol algorithms.Policy
	nodes := map[string]*yaml.Node{}
	good, hasPolicy := true, false
	for _, f := range pairs {
		ff := join(field, f.name)
		switch f.name {
		case "algorithm":
			s, ok := p.text(f.val, ff)
			pol.Algorithm = algorithms.Algorithm(s)
			good = good && ok
		case "limit":
			pol.Limit, ok = p.integer(f.val, ff)
			good = good && ok
		case "period":
			pol.Period, ok = p.duration(f.val, ff)
			good = good && ok
		case "burst":
			pol.Burst, ok = p.integer(f.val, ff)
			good = good && ok
		case "weight":
			w, ok := p.intRange(f.val, ff, 1, MaxWeight)
			t.Weight = int(w)
			good = good && ok
		case "class":
			s, ok := p.text(f.val, ff)
			if ok && !validClass(s) {
				p.add(f.val, ff, nil, "use 1 to 32 bytes of [A-Za-z0-9_.-], got %q", limitLen(s, 40))
				ok = false
			}
			t.Class = s
			good = good && ok
		default:
			p.unknown(f, field, tenantFields)
			good = false
			continue
		}
		nodes[f.name] = f.val
		if f.name != "weight" && f.name != "class" {
			hasPolicy = true
		}
	}
	if !good {
		return t, false
	}
	if !hasPolicy {
		return t, true
	}
	if err := pol.Validate(); err != nil {
		name, msg := splitPolicyError(err)
		at := nodes[name]
		if at == nil {
			at = kv.key
		}
		f := field
		if name != "" {
			f = join(field, name)
		}
		p.add(at, f, err, "%s", msg)
		return t, false
	}
	t.Policy = &pol
	return t, true
}

// validClass reports whether s is a usable metrics class name.
func validClass(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

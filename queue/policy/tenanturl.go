package policy

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/queue"
)

// A base_url may name the job's tenant once, as {tenant}: a whole label
// of its host (https://{tenant}.myshopify.com/admin/) or a whole segment
// of its path (https://hooks.example.com/{tenant}/). A job's URL is then
// checked against the base_url with the job's own tenant in that place
// (docs/policy.md, "A host or a path per tenant").

// tenantVar is what a base_url writes where the job's tenant goes.
const tenantVar = "{tenant}"

// tenantEscaped is tenantVar in an escaped path (url.URL.EscapedPath).
const tenantEscaped = "%7Btenant%7D"

// placeholder stands for tenantVar while net/url parses a base_url (it
// refuses braces in a host): a host label and a path segment that
// escaping leaves alone.
const placeholder = "sluice-tenant-0f3a9c"

// MaxPathTenant is the longest tenant that a {tenant} path segment takes,
// in bytes.
const MaxPathTenant = 255

// ErrTenantURL is wrapped by DownstreamForTenant's error for a URL that a
// {tenant} base_url covers for some tenant but not for the job's: the
// job's tenant cannot fill {tenant} (it is not a host label, or not a safe
// path segment), or the URL is another tenant's host or path. It wraps
// ErrURLNotAllowed.
var ErrTenantURL = fmt.Errorf("%w for the job's tenant", ErrURLNotAllowed)

// findTenantVar checks the braces of a base_url as written and says where
// its {tenant} is: "" when it has none, "host" or "path". Braces serve
// only {tenant}, once, as a whole host label or path segment; errors say
// what to write instead.
func findTenantVar(s string) (string, error) {
	if strings.Contains(s, "${") {
		return "", errors.New("a base_url takes no ${VAR} (environment variables are for headers); write {tenant} where the job's tenant goes")
	}
	n := 0
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], tenantVar):
			n++
			i += len(tenantVar) - 1
		case s[i] == '{' || s[i] == '}':
			return "", badBrace(s, i)
		}
	}
	if n == 0 {
		return "", nil
	}
	if n > 1 {
		return "", fmt.Errorf("{tenant} may appear once, got %d", n)
	}
	at := strings.Index(s, tenantVar)
	sep := strings.Index(s, "://")
	if sep < 0 || at < sep {
		return "", errors.New("{tenant} may only be a label of the host or a segment of the path")
	}
	rest := s[sep+3:]
	at -= sep + 3
	authEnd := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authEnd = i
	}
	if at < authEnd {
		return "host", tenantInHost(rest[:authEnd], at)
	}
	pathEnd := len(rest)
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		pathEnd = i
	}
	if at >= pathEnd {
		return "", errors.New("{tenant} may only be a label of the host or a segment of the path, not in the query or fragment")
	}
	if !slices.Contains(strings.Split(rest[authEnd:pathEnd], "/"), tenantVar) {
		return "", fmt.Errorf("{tenant} must be a whole segment of the path, as in https://hooks.example.com/{tenant}/; got %q", limitLen(rest[authEnd:pathEnd], 80))
	}
	return "path", nil
}

// tenantInHost checks {tenant}, at byte at of auth (a URL's authority),
// as a host label: a whole one, with two labels or more after it, so
// that a tenant chooses a host under a domain and not the domain itself
// ({tenant}.com would let it call any .com); or {tenant}.localhost, every
// name under which is loopback (RFC 6761).
func tenantInHost(auth string, at int) error {
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		if at < i {
			return errors.New("{tenant} may only be a label of the host or a segment of the path, not in the user info")
		}
		auth, at = auth[i+1:], at-i-1
	}
	if strings.HasPrefix(auth, "[") {
		return errors.New("{tenant} cannot be part of an IP address")
	}
	host := auth
	if i := strings.LastIndexByte(auth, ':'); i >= 0 {
		if at > i {
			return errors.New("{tenant} cannot be the port; it may only be a label of the host or a segment of the path")
		}
		host = auth[:i]
	}
	labels := strings.Split(host, ".")
	k := slices.Index(labels, tenantVar)
	switch {
	case slices.Contains(labels, ""):
		return fmt.Errorf("a host with {tenant} must have no empty label (no dot first, last or next to another), got %q", limitLen(host, 80))
	case k < 0:
		return fmt.Errorf("{tenant} must be a whole label of the host, as in https://{tenant}.myshopify.com/; got %q", limitLen(host, 80))
	case len(labels)-k-1 < 2 && !(len(labels) == k+2 && strings.EqualFold(labels[k+1], "localhost")):
		return fmt.Errorf("{tenant} needs two labels or more after it, as in {tenant}.myshopify.com: in %q a tenant would choose the domain itself", limitLen(host, 80))
	case strings.Trim(labels[len(labels)-1], "0123456789") == "":
		return fmt.Errorf("{tenant} cannot be part of an IP address, got %q", limitLen(host, 80))
	}
	return nil
}

// badBrace explains the brace at s[i] that is not part of {tenant}.
func badBrace(s string, i int) error {
	word := s[i:]
	if end := strings.IndexByte(word, '}'); s[i] == '{' && end > 0 {
		word = word[:end+1]
	}
	word = limitLen(word, 40)
	inner := strings.Trim(word, "{}")
	switch {
	case s[i] == '}':
		return fmt.Errorf("a } without its {: only {tenant} may be written in braces")
	case strings.EqualFold(inner, "tenant") && !strings.HasPrefix(word, "{{"):
		return fmt.Errorf("%q: did you mean \"{tenant}\"? (in lower case)", word)
	case len(inner) <= 64 && distance(strings.ToLower(inner), "tenant") <= 2:
		return fmt.Errorf("%q: did you mean \"{tenant}\"?", word)
	}
	return fmt.Errorf("%q: only {tenant} may be written in braces, which the job's tenant fills", word)
}

// putTenantVar completes parseBaseURL for a base_url with {tenant},
// where says where (findTenantVar): u was parsed with placeholder in its
// place, which goes back as tenantVar in the Host, or in the Path (and
// tenantEscaped in the RawPath), as a Config made by hand writes it.
func putTenantVar(u *url.URL, where string) {
	switch where {
	case "host":
		u.Host = strings.Replace(u.Host, placeholder, tenantVar, 1)
	case "path":
		u.Path = strings.Replace(u.Path, placeholder, tenantVar, 1)
		if u.RawPath != "" {
			u.RawPath = strings.Replace(u.RawPath, placeholder, tenantEscaped, 1)
		}
	}
}

// hostTenantProblem says why tenant cannot be a host label, or returns "".
// A host tenant is 1 to 63 bytes of a-z, 0-9 and -, not starting or
// ending with -. Upper case is refused, not folded: "Acme" and "acme"
// are two tenants, and would be one host.
func hostTenantProblem(tenant string) string {
	switch {
	case tenant == "":
		return "the job has no tenant"
	case len(tenant) > 63:
		return fmt.Sprintf("it is %d bytes long, more than a host label's 63", len(tenant))
	}
	if r := badRune(asciiLower(tenant), false); r >= 0 {
		return fmt.Sprintf("it holds %s", describeRune(r))
	}
	if lower := asciiLower(tenant); lower != tenant {
		return fmt.Sprintf("it has upper-case letters, which sluice refuses rather than folds: %q and %q are two tenants but would be one host", tenant, lower)
	}
	if tenant[0] == '-' || tenant[len(tenant)-1] == '-' {
		return "it starts or ends with a hyphen"
	}
	return ""
}

// pathTenantProblem says why tenant cannot be a path segment, or returns
// "". A path tenant is 1 to MaxPathTenant bytes of a-z, 0-9, -, _ and .,
// with no . first, last or next to another: no "." or ".." segment, and
// no name that a server trims (Windows servers drop a trailing dot), and
// nothing that escaping or decoding changes. Upper case is refused, as
// for a host: a server that ignores case would take "Acme"'s path for
// "acme"'s.
func pathTenantProblem(tenant string) string {
	switch {
	case tenant == "":
		return "the job has no tenant"
	case len(tenant) > MaxPathTenant:
		return fmt.Sprintf("it is %d bytes long, more than %d", len(tenant), MaxPathTenant)
	}
	if r := badRune(asciiLower(tenant), true); r >= 0 {
		return fmt.Sprintf("it holds %s", describeRune(r))
	}
	if lower := asciiLower(tenant); lower != tenant {
		return fmt.Sprintf("it has upper-case letters, which sluice refuses rather than folds: a server that ignores case would take %.64q's path for %.64q's", tenant, lower)
	}
	if tenant[0] == '.' || tenant[len(tenant)-1] == '.' || strings.Contains(tenant, "..") {
		return "it starts or ends with a dot, or has two in a row"
	}
	return ""
}

const (
	hostTenantRule = "a tenant in a host is 1 to 63 of a-z, 0-9 and -, not starting or ending with -"
	pathTenantRule = "a tenant in a path is 1 to 255 of a-z, 0-9, -, _ and ., with no . first, last or next to another"
)

// asciiLower returns s with A-Z in lower case, and nothing else changed
// (strings.ToLower maps the Kelvin sign to k).
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// badRune returns the first rune of s that a host tenant (or with path,
// a path tenant) may not hold, or -1 for none; utf8.RuneError for bytes
// that are not UTF-8.
func badRune(s string, path bool) rune {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
		case path && (r == '_' || r == '.'):
		default:
			return r
		}
	}
	return -1
}

// describeRune names r for an error, quoted so that a control character
// or a look-alike shows.
func describeRune(r rune) string {
	switch {
	case r == utf8.RuneError:
		return "bytes that are not UTF-8"
	case r > 0x7f:
		return fmt.Sprintf("%+q, which is not ASCII (write the tenant's punycode, such as xn--caf-dma, for an IDN)", r)
	}
	return strconv.QuoteRune(r)
}

// fillTenant returns base (a BaseURL) with tenant in the place of
// {tenant}, written as a job would call it; base's own string when it has
// none.
func fillTenant(base *url.URL, tenant string) string {
	s := base.Scheme + "://" + strings.Replace(base.Host, tenantVar, tenant, 1) + base.EscapedPath()
	return strings.Replace(s, tenantEscaped, tenant, 1)
}

// showBase quotes a BaseURL for an error message, {tenant} written as in
// the file.
func showBase(u *url.URL) string {
	return strconv.Quote(limitLen(strings.Replace(u.Scheme+"://"+u.Host+u.EscapedPath(), tenantEscaped, tenantVar, 1), 200))
}

// overlap is a base_url, downstream a's, through which one tenant could
// call another's host or path, because of downstream b's {tenant}.
type overlap struct{ a, b, why string }

// tenantOverlaps finds the base_urls that would let one tenant call
// another's host or path, the downstreams taken in order (the file's),
// each pair reported once, at the later of the two or at the one without
// {tenant}; ref names a downstream for the message ("downstreams.x (line
// 7)"). Such are: a host that a {tenant} host gives some tenant (every
// tenant could call it through its own downstream); two {tenant} hosts
// that give one host to two tenants ({tenant}.b.example.com and
// x.{tenant}.example.com both give x.b.example.com); and, on one origin,
// a path at or above a {tenant} segment's or inside it, or two {tenant}
// segments at different depths where one path is under the other.
func tenantOverlaps(order []string, ds map[string]queue.Downstream, ref func(string) string) []overlap {
	var out []overlap
	type hostTenant struct {
		name   string
		labels []string
		at     int
	}
	var hosts []hostTenant
	patterns := map[string]string{} // a {tenant} host -> its first downstream
	for _, name := range order {
		if u := ds[name].BaseURL; u != nil && hasHostTenant(u) {
			labels := strings.Split(strings.ToLower(u.Hostname()), ".")
			hosts = append(hosts, hostTenant{name, labels, slices.Index(labels, tenantVar)})
			if _, ok := patterns[strings.Join(labels, ".")]; !ok {
				patterns[strings.Join(labels, ".")] = name
			}
		}
	}
	byOrigin := map[string][]prefix{} // the base_urls of hosts without {tenant}
	var origins []string
	for _, name := range order {
		u := ds[name].BaseURL
		if u == nil || hasHostTenant(u) {
			continue
		}
		o := originOf(u)
		if byOrigin[o] == nil {
			origins = append(origins, o)
		}
		byOrigin[o] = append(byOrigin[o], prefixOf(u, name))
		if host := strings.ToLower(u.Hostname()); len(hosts) > 0 && !strings.Contains(host, ":") {
			labels := strings.Split(host, ".")
			for i, label := range labels {
				labels[i] = tenantVar
				t, ok := patterns[strings.Join(labels, ".")]
				labels[i] = label
				if ok {
					out = append(out, overlap{name, t, fmt.Sprintf("the host %q is the one that %s gives tenant %q, so every tenant could call it through this downstream: a host that a {tenant} host covers must be left to it",
						limitLen(host, 80), ref(t), label)})
					break
				}
			}
		}
	}
	// Two {tenant} hosts overlap when they agree but in the labels of
	// their two tenants: each keys itself by its labels with both blank,
	// and the two places.
	pairs := map[string]hostTenant{}
	for _, h := range hosts {
		key := func(tenantAt, other int) string {
			l := slices.Clone(h.labels)
			l[tenantAt], l[other] = "", ""
			return fmt.Sprintf("%s|%d|%d", strings.Join(l, "."), tenantAt, other)
		}
		for j := range h.labels {
			if j == h.at {
				continue
			}
			if o, ok := pairs[key(j, h.at)]; ok {
				example := slices.Clone(h.labels)
				example[h.at] = o.labels[h.at]
				out = append(out, overlap{h.name, o.name, fmt.Sprintf("the host %q would be tenant %q's through this downstream and tenant %q's through %s: {tenant} must be the same label of hosts that could be one",
					limitLen(strings.Join(example, "."), 80), example[h.at], example[j], ref(o.name))})
				break
			}
		}
		for j := range h.labels {
			if k := key(h.at, j); j != h.at && pairs[k].name == "" {
				pairs[k] = h
			}
		}
	}
	// On one origin, a {tenant} path against every other path.
	related := func(a, b string) bool { return a == b || strings.HasPrefix(b, a+"/") || strings.HasPrefix(a, b+"/") }
	for _, o := range origins {
		list := byOrigin[o]
		for i, t := range list {
			if !t.tenant {
				continue
			}
			for j, e := range list {
				switch {
				case j == i || e.tenant && j > i: // a pair of {tenant} paths once
				case !e.tenant && related(e.path, t.path):
					out = append(out, overlap{e.name, t.name, fmt.Sprintf("its path covers, or lies in, the tenants' paths of %s, so one tenant could call another's path through this downstream",
						ref(t.name))})
				case e.tenant && e.path != t.path && related(e.path, t.path):
					out = append(out, overlap{t.name, e.name, fmt.Sprintf("its {tenant} is at another depth of the same path as that of %s, so a path could be one tenant's through one and another's through the other",
						ref(e.name))})
				}
			}
		}
	}
	return out
}

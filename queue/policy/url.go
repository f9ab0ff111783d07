package policy

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/urlerr"
	"github.com/sluicehq/sluice/queue"
)

// ErrURLNotAllowed is wrapped by every error of DownstreamFor: the URL is
// not one that the built-in HTTP job may call.
var ErrURLNotAllowed = errors.New("URL not allowed")

// parseURL parses s by the rules that a base_url and the URL of an HTTP
// job share (docs/policy.md). Its errors quote the URL's origin and path,
// never its query or user info, and nothing of a URL that does not parse.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("not a valid URL: %s", urlerr.Reason(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("not an absolute http or https URL such as https://api.example.com/v1/; got scheme %.32q", u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return nil, errors.New("the URL has no host, as api.example.com in https://api.example.com/v1/")
	}
	switch why := pathTrick(u); {
	case u.User != nil:
		return nil, fmt.Errorf("%s carries user info (user@ or user:password@); send credentials in headers", shown(u))
	case originOf(u) == "":
		return nil, fmt.Errorf("%s: port %q must be between 1 and 65535", shown(u), u.Port())
	case why != "":
		return nil, fmt.Errorf("%s has %s", shown(u), why)
	}
	return u, nil
}

// parseBaseURL checks a downstream's base_url: parseURL's rules, no query
// or fragment, and braces only for one {tenant} (findTenantVar), which
// the URL returned holds as putTenantVar writes it. The host is kept in
// lower case.
func parseBaseURL(s string) (*url.URL, error) {
	where, err := findTenantVar(s)
	switch {
	case err != nil:
		return nil, err
	case where != "" && strings.Contains(strings.ToLower(s), placeholder):
		return nil, fmt.Errorf("must not hold %q, which stands for {tenant} while it is parsed", placeholder)
	}
	u, err := parseURL(strings.Replace(s, tenantVar, placeholder, 1))
	switch {
	case err != nil:
		return nil, errors.New(strings.ReplaceAll(err.Error(), placeholder, tenantVar))
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("must not have a query (?...)")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, errors.New("must not have a fragment (#...)")
	case strings.Contains(u.Path, tenantVar):
		return nil, errors.New("write {tenant} as it is, not percent-encoded (%7Btenant%7D)")
	}
	u.Host = strings.ToLower(u.Host)
	putTenantVar(u, where)
	return u, nil
}

// originOf returns scheme://host:port in lower case, with the port always
// written (a missing one is the scheme's default), or "" for a port out of
// range.
func originOf(u *url.URL) string {
	scheme, host, port := originParts(u)
	if port == "" {
		return ""
	}
	return joinOrigin(scheme, host, port)
}

// originParts returns u's scheme and host in lower case and its port, the
// scheme's default when u has none; port is "" when out of range.
func originParts(u *url.URL) (scheme, host, port string) {
	scheme, host = strings.ToLower(u.Scheme), strings.ToLower(u.Hostname())
	n, err := strconv.Atoi(cmp.Or(u.Port(), map[string]string{"http": "80", "https": "443"}[scheme]))
	if err != nil || n < 1 || n > 65535 {
		return scheme, host, ""
	}
	return scheme, host, strconv.Itoa(n)
}

func joinOrigin(scheme, host, port string) string {
	return scheme + "://" + net.JoinHostPort(host, port)
}

// basePath returns the escaped path of a base URL without trailing
// slashes: "" for the root.
func basePath(u *url.URL) string {
	return strings.TrimRight(u.EscapedPath(), "/")
}

// pathTrick says what in u's path a server might resolve elsewhere than
// it appears to point, or returns "": once decoded, a "." or ".." segment
// between slashes or backslashes; at any depth of percent-encoding, a ";"
// or a "%25" that encodes a dot, a slash or a backslash (docs/policy.md).
func pathTrick(u *url.URL) string {
	p, _ := url.PathUnescape(u.EscapedPath()) // EscapedPath's escapes are valid
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return "a . or .. path segment"
		}
	}
	for range 8 {
		if strings.Contains(p, ";") {
			return "a ; in its path (a path parameter to some servers: /api/..;/x is /x to Tomcat)"
		}
		if l := strings.ToLower(p); strings.Contains(l, "%2e") || strings.Contains(l, "%2f") || strings.Contains(l, "%5c") {
			return "a %25 that encodes a dot or a slash in its path (a server that decodes twice reads . or /)"
		}
		next, err := url.PathUnescape(p)
		if err != nil || next == p {
			return "" // no "%", or a literal "%" that no server decodes
		}
		p = next
	}
	return "percent-encoding nested too deep in its path"
}

// DownstreamFor returns the downstream whose base_url covers rawURL for
// a job without a tenant: DownstreamForTenant with tenant "", for which a
// base_url with {tenant} covers nothing.
func (c *Config) DownstreamFor(rawURL string) (queue.Downstream, error) {
	return c.DownstreamForTenant("", rawURL)
}

// DownstreamForTenant returns the downstream whose base_url covers rawURL
// for a job of tenant, so that a built-in HTTP job cannot make the workers
// call an arbitrary host: the same origin, and a path at or under the
// base_url's on a segment boundary, {tenant} standing for tenant; the
// longest such path wins, then the first name (docs/policy.md, "URLs that
// HTTP jobs may call"). It refuses, with an error wrapping
// ErrURLNotAllowed, a URL that parseURL refuses or that no downstream
// covers, and with one wrapping ErrTenantURL a URL that a {tenant}
// base_url covers for another tenant, or whose {tenant} the tenant cannot
// fill (hostTenantProblem, pathTenantProblem). Downstreams without a
// base_url cover nothing.
func (c *Config) DownstreamForTenant(tenant, rawURL string) (queue.Downstream, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return queue.Downstream{}, fmt.Errorf("%w: %w", ErrURLNotAllowed, err)
	}
	idx := c.index
	if idx == nil { // a Config not made by Parse
		idx = indexBaseURLs(c.Downstreams)
	}
	path := cmp.Or(u.EscapedPath(), "/")
	scheme, host, port := originParts(u)
	name, why := c.match(u, idx.origins[joinOrigin(scheme, host, port)], path, tenant)
	if name == "" && idx.hostTenants && !strings.Contains(host, ":") {
		// A {tenant} host is indexed under its origin with the label
		// {tenant}: one lookup per label of the URL's host.
		labels := strings.Split(host, ".")
		for i, label := range labels {
			labels[i] = tenantVar
			list := idx.origins[joinOrigin(scheme, strings.Join(labels, "."), port)]
			pattern := strings.Join(labels, ".")
			labels[i] = label
			if len(list) == 0 {
				continue
			}
			var w error
			d := c.Downstreams[list[0].name]
			switch problem := hostTenantProblem(tenant); {
			case problem != "":
				w = fmt.Errorf("%w: tenant %.64q cannot fill {tenant} in downstream %q's base_url %s: %s; %s",
					ErrTenantURL, tenant, d.Name, showBase(d.BaseURL), problem, hostTenantRule)
			case label != tenant:
				w = fmt.Errorf("%w: %s is not tenant %q's host: downstream %q's base_url %s gives it %q",
					ErrTenantURL, shown(u), tenant, d.Name, showBase(d.BaseURL), strings.Replace(pattern, tenantVar, tenant, 1))
			default:
				name, w = c.match(u, list, path, tenant)
			}
			why = cmp.Or(why, w)
			if name != "" {
				break
			}
		}
	}
	switch {
	case name != "":
		return c.Downstreams[name], nil
	case why != nil:
		return queue.Downstream{}, why
	}
	return queue.Downstream{}, fmt.Errorf("%w: no downstream's base_url covers %s", ErrURLNotAllowed, shown(u))
}

// match returns the name of the first base_url path of list that covers
// path for tenant; or else "" and why a {tenant} path that would cover it
// for some tenant does not for this one, or nil.
func (c *Config) match(u *url.URL, list []prefix, path, tenant string) (string, error) {
	var why error
	for _, b := range list {
		if !b.tenant {
			if path == b.path || strings.HasPrefix(path, b.path+"/") {
				return b.name, nil
			}
			continue
		}
		seg, ok := strings.CutPrefix(path, b.path+"/")
		if seg, _, _ = strings.Cut(seg, "/"); !ok || seg == "" {
			continue
		}
		d, own := c.Downstreams[b.name], b.path+"/"+tenant+b.rest
		switch problem := pathTenantProblem(tenant); {
		case problem != "":
			why = cmp.Or(why, fmt.Errorf("%w: tenant %.64q cannot fill {tenant} in downstream %q's base_url %s: %s; %s",
				ErrTenantURL, tenant, d.Name, showBase(d.BaseURL), problem, pathTenantRule))
		case seg != tenant:
			why = cmp.Or(why, fmt.Errorf("%w: %s is not under tenant %q's path: downstream %q's base_url %s gives it %q",
				ErrTenantURL, shown(u), tenant, d.Name, showBase(d.BaseURL), own+"/"))
		case path == own || strings.HasPrefix(path, own+"/"):
			return b.name, nil
		}
	}
	return "", why
}

// prefix is a downstream's base_url path in the index: basePath, or for
// a {tenant} path the part before the tenant's segment (path) and the
// part after it (rest), which cover path/<tenant>rest.
type prefix struct {
	path, name string
	tenant     bool
	rest       string
}

// prefixOf returns the prefix of a downstream's base URL u.
func prefixOf(u *url.URL, name string) prefix {
	p := basePath(u)
	before, after, ok := strings.Cut(p, "/"+tenantEscaped)
	if ok && (after == "" || after[0] == '/') {
		return prefix{path: before, name: name, tenant: true, rest: after}
	}
	return prefix{path: p, name: name}
}

// size is the length of b's path as written, for the order of the index.
func (b prefix) size() int {
	if b.tenant {
		return len(b.path) + len("/"+tenantVar) + len(b.rest)
	}
	return len(b.path)
}

// baseIndex is the downstreams' base_urls, so that a URL is resolved by
// a map lookup and a scan of its host's few paths, not of every
// downstream.
type baseIndex struct {
	// origins are the paths of each origin (originOf), longest first and
	// then by name; a {tenant} host's are under its origin with the label
	// {tenant} as written, which no URL's host can be.
	origins map[string][]prefix
	// hostTenants tells whether any host has {tenant}: only then is a
	// URL's host looked up a label at a time.
	hostTenants bool
}

// indexBaseURLs indexes the base_urls of the downstreams that have one.
func indexBaseURLs(ds map[string]queue.Downstream) *baseIndex {
	idx := &baseIndex{origins: map[string][]prefix{}}
	for name, d := range ds {
		if d.BaseURL != nil {
			o := originOf(d.BaseURL)
			idx.origins[o] = append(idx.origins[o], prefixOf(d.BaseURL, name))
			idx.hostTenants = idx.hostTenants || hasHostTenant(d.BaseURL)
		}
	}
	for _, ps := range idx.origins {
		slices.SortFunc(ps, func(a, b prefix) int {
			return cmp.Or(cmp.Compare(b.size(), a.size()), cmp.Compare(a.name, b.name))
		})
	}
	return idx
}

// hasHostTenant tells whether a base URL has {tenant} in its host.
func hasHostTenant(u *url.URL) bool {
	return slices.Contains(strings.Split(strings.ToLower(u.Hostname()), "."), tenantVar)
}

// shown quotes u's scheme, host and path for an error message: never its
// user info or query.
func shown(u *url.URL) string {
	return strconv.Quote(limitLen(u.Scheme+"://"+u.Host+u.EscapedPath(), 200))
}

func limitLen(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

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

// parseBaseURL checks a downstream's base_url: parseURL's rules, and no
// query or fragment. The host is kept in lower case.
func parseBaseURL(s string) (*url.URL, error) {
	u, err := parseURL(s)
	switch {
	case err != nil:
		return nil, err
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("must not have a query (?...)")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, errors.New("must not have a fragment (#...)")
	}
	u.Host = strings.ToLower(u.Host)
	return u, nil
}

// originOf returns scheme://host:port in lower case, with the port always
// written (a missing one is the scheme's default), or "" for a port out of
// range.
func originOf(u *url.URL) string {
	port, err := strconv.Atoi(cmp.Or(u.Port(), map[string]string{"http": "80", "https": "443"}[u.Scheme]))
	if err != nil || port < 1 || port > 65535 {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(port)))
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

// DownstreamFor returns the downstream whose base_url covers rawURL, so
// that a built-in HTTP job cannot make the workers call an arbitrary host:
// the same origin, and a path at or under the base_url's on a segment
// boundary; the longest such path wins, then the first name (docs/policy.md,
// "URLs that HTTP jobs may call"). It refuses, with an error wrapping
// ErrURLNotAllowed, a URL that parseURL refuses or that no downstream
// covers. Downstreams without a base_url cover nothing.
func (c *Config) DownstreamFor(rawURL string) (queue.Downstream, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return queue.Downstream{}, fmt.Errorf("%w: %w", ErrURLNotAllowed, err)
	}
	origins := c.origins
	if origins == nil { // a Config not made by Parse
		origins = indexBaseURLs(c.Downstreams)
	}
	path := cmp.Or(u.EscapedPath(), "/")
	for _, b := range origins[originOf(u)] { // longest first
		if path == b.path || strings.HasPrefix(path, b.path+"/") {
			return c.Downstreams[b.name], nil
		}
	}
	return queue.Downstream{}, fmt.Errorf("%w: no downstream's base_url covers %s", ErrURLNotAllowed, shown(u))
}

// prefix is a downstream's base_url path (basePath), in an index by
// origin.
type prefix struct{ path, name string }

// indexBaseURLs returns the base_url paths of the downstreams that have
// one, by origin (originOf), each origin's longest first and then by
// name, so that a URL is resolved by one map lookup and a scan of its
// host's few paths, not of every downstream.
func indexBaseURLs(ds map[string]queue.Downstream) map[string][]prefix {
	idx := map[string][]prefix{}
	for name, d := range ds {
		if d.BaseURL != nil {
			o := originOf(d.BaseURL)
			idx[o] = append(idx[o], prefix{basePath(d.BaseURL), name})
		}
	}
	for _, ps := range idx {
		slices.SortFunc(ps, func(a, b prefix) int {
			return cmp.Or(cmp.Compare(len(b.path), len(a.path)), cmp.Compare(a.name, b.name))
		})
	}
	return idx
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

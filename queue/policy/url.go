package policy

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/urlerr"
	"github.com/sluicehq/sluice/queue"
)

// ErrURLNotAllowed is wrapped by every error of DownstreamFor: the URL is
// not one that the built-in HTTP job may call.
var ErrURLNotAllowed = errors.New("sluice: URL not allowed")

// parseURL parses s by the rules that a base_url and the URL of an HTTP
// job share: an absolute http or https URL with a host, without user info,
// with a valid port, and without a path that a server might resolve
// elsewhere than it appears to point (dotSegments, pathTrick). Its errors
// quote the URL's origin and path, never its query or user info, and
// nothing of a URL that does not parse.
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
	show := shown(u)
	_, portErr := portOf(u)
	why := pathTrick(u)
	switch {
	case u.User != nil:
		return nil, fmt.Errorf("%s carries user info (user@ or user:password@); send credentials in headers", show)
	case portErr != nil:
		return nil, fmt.Errorf("%s: %w", show, portErr)
	case dotSegments(u):
		return nil, fmt.Errorf("%s has a . or .. path segment", show)
	case why != "":
		return nil, fmt.Errorf("%s has %s", show, why)
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

// portOf returns u's port, or the scheme's default port when u has none.
func portOf(u *url.URL) (int, error) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q must be between 1 and 65535", p)
	}
	return n, nil
}

// originOf returns scheme://host:port, lower case, with the port always
// written.
func originOf(u *url.URL) string {
	port, _ := portOf(u)
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host + ":" + strconv.Itoa(port)
}

// basePath returns the escaped path of a base URL without trailing
// slashes: "" for the root.
func basePath(u *url.URL) string {
	return strings.TrimRight(u.EscapedPath(), "/")
}

// dotSegments reports whether u's path, fully decoded, has a "." or ".."
// segment between slashes or backslashes: a path that a server might
// resolve to somewhere other than where it appears to point.
func dotSegments(u *url.URL) bool {
	p, err := url.PathUnescape(u.EscapedPath())
	if err != nil {
		return true
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// maxUnescape is how many layers of percent-encoding pathTrick reads.
const maxUnescape = 8

// pathTrick says what in u's path a downstream might read differently from
// the base_url check, or returns "" for a plain path: a ";" (a path
// parameter to Tomcat and Spring, which read /api/..;/x as /x), raw or
// encoded, or a "%25" that encodes a dot, a slash or a backslash (a
// server that decodes twice reads /api/%252e%252e/x as /x). Layers of
// "%25" are read until none is left, so deeper nesting is caught too.
// (Single-encoded dots and slashes are decoded by dotSegments.)
func pathTrick(u *url.URL) string {
	p, err := url.PathUnescape(u.EscapedPath())
	if err != nil {
		return "an invalid escape in its path"
	}
	for range maxUnescape {
		if strings.Contains(p, ";") {
			return "a ; in its path (a path parameter to some servers: /api/..;/x is /x to Tomcat)"
		}
		if !strings.Contains(p, "%") {
			return ""
		}
		lower := strings.ToLower(p)
		for _, enc := range []string{"%2e", "%2f", "%5c"} {
			if strings.Contains(lower, enc) {
				return "a %25 that encodes a dot or a slash in its path (a server that decodes twice reads . or /)"
			}
		}
		next, err := url.PathUnescape(p)
		if err != nil || next == p {
			return "" // a literal "%" no server decodes to anything
		}
		p = next
	}
	return "percent-encoding nested too deep in its path"
}

// DownstreamFor returns the downstream whose base_url covers rawURL: the
// same scheme, host and port (a missing port is the scheme's default), and
// a path that is the base_url's path or lies under it on a segment
// boundary (https://a.com/api covers https://a.com/api and
// https://a.com/api/x, not https://a.com/api2). When several base URLs
// cover rawURL, the longest path wins, and among equals the first name.
//
// It refuses, with an error wrapping ErrURLNotAllowed, a URL that breaks
// the rules of a base_url but the query and fragment (parseURL), or that
// no downstream covers: the built-in HTTP job uses it so that a job cannot
// make the workers call an arbitrary host. Downstreams without a base_url
// cover nothing.
func (c *Config) DownstreamFor(rawURL string) (queue.Downstream, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return queue.Downstream{}, fmt.Errorf("%w: %w", ErrURLNotAllowed, err)
	}
	origin, path := originOf(u), cmp.Or(u.EscapedPath(), "/")
	best, bestLen := "", -1
	for name, d := range c.Downstreams {
		if d.BaseURL == nil || originOf(d.BaseURL) != origin {
			continue
		}
		bpath := basePath(d.BaseURL)
		covers := path == bpath || strings.HasPrefix(path, bpath+"/")
		if covers && (len(bpath) > bestLen || len(bpath) == bestLen && name < best) {
			best, bestLen = name, len(bpath)
		}
	}
	if bestLen < 0 {
		return queue.Downstream{}, fmt.Errorf("%w: no downstream's base_url covers %s", ErrURLNotAllowed, shown(u))
	}
	return c.Downstreams[best], nil
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

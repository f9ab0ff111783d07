package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/queue"
)

func TestDownstreamFor(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 1}",
		"downstreams:",
		"  api: {rate: 1, base_url: http://a.com/api}",
		"  root: {rate: 1, base_url: https://b.com}",
		"  admin: {rate: 1, base_url: https://B.com/admin/}",
		"  port: {rate: 1, base_url: http://c.com:8080/}",
		"  v6: {rate: 1, base_url: \"http://[::1]:9000/x\"}",
		"  https-default: {rate: 1, base_url: \"https://d.com:443/v1/\"}",
		"  nourl: {rate: 1}",
	))
	tests := []struct {
		url  string
		want string // downstream name; "" for refused
	}{
		{"http://a.com/api", "api"},
		{"http://a.com/api/", "api"},
		{"http://a.com/api/orders/7?limit=5#top", "api"},
		// A "%25" that encodes no dot, slash or ";" is plain text.
		{"http://a.com/api/50%25off", "api"},
		{"http://a.com/api/a%2541", "api"},
		{"http://a.com/api/a.b%2ec", "api"},
		{"HTTP://A.COM/api/x", "api"},
		{"http://a.com:80/api/x", "api"},
		{"http://a.com:/api", "api"},
		{"https://b.com", "root"},
		{"https://b.com/", "root"},
		{"https://b.com/anything/at/all", "root"},
		{"https://b.com/admin", "admin"},
		{"https://b.com/admin/users", "admin"},
		{"https://b.com:443/admin/users", "admin"},
		{"https://b.com/administrator", "root"},
		{"https://b.com/api@evil.com/", "root"}, // a request to b.com, path /api@evil.com/
		{"http://c.com:8080/z", "port"},
		{"http://[::1]:9000/x/y", "v6"},
		{"https://d.com/v1/models", "https-default"},

		// Paths on a segment boundary only.
		{"http://a.com/api2/x", ""},
		{"http://a.com/api2", ""},
		{"http://a.com/ap", ""},
		{"http://a.com/", ""},
		{"http://a.com", ""},
		{"http://a.com/API/x", ""},
		{"http://a.com/api%2Fx", ""},
		{"http://a.com/%61pi/x", ""},
		{"http://[::1]:9000/xy", ""},
		// Scheme, host and port must all match.
		{"https://a.com/api", ""},
		{"http://a.com:8080/api", ""},
		{"http://c.com/z", ""},
		{"http://c.com:80/z", ""},
		{"https://d.com:8443/v1/x", ""},
		{"http://a.com./api", ""},
		{"http://a.com.evil.com/api", ""},
		{"http://evil.com/http://a.com/api", ""},
		// User info and other tricks.
		{"http://a.com/api@evil.com/", ""},
		{"http://evil.com#a.com/api", ""},
		{"http://evil.com?a.com/api", ""},
		{"http://a.com@evil.com/api", ""},
		{"http://a.com:80@evil.com/api", ""},
		{"http://user:pw@a.com/api/x", ""},
		{"http://user@a.com/api/x", ""},
		{"http://a.com\\@evil.com/api", ""},
		{"http://a .com/api", ""},
		{"http://a.com:99999/api", ""},
		{"http://a.com:0/api", ""},
		{"http://a.com/api/../admin", ""},
		{"http://a.com/api/./x", ""},
		{"http://a.com/api/..", ""},
		{"http://a.com/api/%2e%2e/admin", ""},
		{"http://a.com/api/%2E./admin", ""},
		{"http://a.com/api/x%2F..%2F..%2Fadmin", ""},
		{"http://a.com/api/..%5Cadmin", ""},
		{"http://a.com/api/x/..\\..\\admin", ""},
		// Paths a downstream may read differently (issue 19): path
		// parameters, and dots and slashes encoded twice or more.
		{"http://a.com/api/..;/secret", ""},
		{"http://a.com/api;/x", ""},
		{"http://a.com/api/x;jsessionid=1", ""},
		{"http://a.com/api/x%3b", ""},
		{"http://a.com/api/x%253B", ""},
		{"http://a.com/api/%252e%252e/secret", ""},
		{"http://a.com/api/%252E%252E/secret", ""},
		{"http://a.com/api/x%252fy", ""},
		{"http://a.com/api/..%252fsecret", ""},
		{"http://a.com/api/..%255csecret", ""},
		{"http://a.com/api/%25252e%25252e/secret", ""},
		{"http://a.com/api/" + strings.Repeat("%25", 9) + "2e", ""},
		// Not absolute http(s).
		{"/api/x", ""},
		{"//a.com/api", ""},
		{"a.com/api", ""},
		{"http:a.com/api", ""},
		{"http:///api", ""},
		{"ftp://a.com/api", ""},
		{"javascript:alert(1)", ""},
		{"", ""},
		{"http://a.com/api\n", ""},
	}
	for _, tt := range tests {
		d, err := cfg.DownstreamFor(tt.url)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("DownstreamFor(%q) = %s, want refused", tt.url, d.Name)
		case tt.want == "" && !errors.Is(err, ErrURLNotAllowed):
			t.Errorf("DownstreamFor(%q) error %v does not wrap ErrURLNotAllowed", tt.url, err)
		case tt.want != "" && err != nil:
			t.Errorf("DownstreamFor(%q): %v, want %s", tt.url, err, tt.want)
		case tt.want != "" && d.Name != tt.want:
			t.Errorf("DownstreamFor(%q) = %s, want %s", tt.url, d.Name, tt.want)
		}
	}
}

func TestDownstreamForMessages(t *testing.T) {
	cfg := mustParse(t, doc("queue: {bound: 1}", "downstreams:", "  api: {rate: 1, base_url: http://a.com/api}"))
	for url, want := range map[string]string{
		"http://evil.com/x?token=secret": `URL not allowed: no downstream's base_url covers "http://evil.com/x"`,
		"http://u:secret@a.com/api":      `URL not allowed: "http://a.com/api" carries user info (user@ or user:password@); send credentials in headers`,
		"http://a.com/api/../x?k=secret": `URL not allowed: "http://a.com/api/../x" has a . or .. path segment`,
		"/api":                           `URL not allowed: not an absolute http or https URL such as https://api.example.com/v1/; got scheme ""`,
		"http://a b/?secret":             `URL not allowed: not a valid URL: invalid character in host name`,
		// A password with a "/" or a port followed by more: net/url
		// quotes the text it took for a port.
		"http://u:secret/x@a.com/api":            `URL not allowed: not a valid URL: invalid port after host`,
		"http://a.com:8092:secret/api":           `URL not allowed: not a valid URL: invalid port after host`,
		"http://a.com:70000/api?k=secret":        `URL not allowed: "http://a.com:70000/api": port "70000" must be between 1 and 65535`,
		"http://a.com/api/..;/x?k=secret":        `URL not allowed: "http://a.com/api/..;/x" has a ; in its path (a path parameter to some servers: /api/..;/x is /x to Tomcat)`,
		"http://a.com/api/%252e%252e/x?k=secret": `URL not allowed: "http://a.com/api/%252e%252e/x" has a %25 that encodes a dot or a slash in its path (a server that decodes twice reads . or /)`,
	} {
		_, err := cfg.DownstreamFor(url)
		if err == nil || err.Error() != want {
			t.Errorf("DownstreamFor(%q) = %v\nwant %s", url, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("DownstreamFor(%q) leaks the query or password: %v", url, err)
		}
	}
}

// TestDownstreamForBuiltInCode covers Configs that were not parsed: no
// downstreams, and two downstreams with one base URL.
func TestDownstreamForBuiltInCode(t *testing.T) {
	var empty Config
	if _, err := empty.DownstreamFor("https://a.com/"); !errors.Is(err, ErrURLNotAllowed) {
		t.Errorf("empty Config: %v", err)
	}
	base, err := parseBaseURL("https://a.com/x/")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Downstreams: map[string]queue.Downstream{"b": {Name: "b", BaseURL: base}, "a": {Name: "a", BaseURL: base}}}
	for range 20 {
		if d, err := cfg.DownstreamFor("https://a.com/x/y"); err != nil || d.Name != "a" {
			t.Fatalf("tie = %s, %v; want a (the first name)", d.Name, err)
		}
	}
}

// TestDownstreamForIsALookup: resolving a URL costs the same whatever the
// number of downstreams: the base URLs are indexed by origin, so a URL
// takes one map lookup and a scan of its own host's paths. Counted in
// allocations, which a scan of every downstream makes for each (8,020
// for two URLs among 2,001 downstreams, 60 among 11).
func TestDownstreamForIsALookup(t *testing.T) {
	allocs := func(n int) float64 {
		lines := []string{"queue: {bound: 1}", "downstreams:"}
		for i := range n {
			lines = append(lines, fmt.Sprintf("  d%d: {rate: 1, base_url: https://h%d.example.com/v1/}", i, i))
		}
		lines = append(lines, "  deep: {rate: 1, base_url: https://h0.example.com/v1/deep/}")
		cfg := mustParse(t, doc(lines...))
		return testing.AllocsPerRun(20, func() {
			d, err := cfg.DownstreamFor("https://h0.example.com/v1/deep/x")
			if err != nil || d.Name != "deep" {
				t.Fatalf("DownstreamFor: %v, %v", d.Name, err)
			}
			if _, err := cfg.DownstreamFor("https://nowhere.example.com/"); err == nil {
				t.Fatal("a URL of no downstream's host was allowed")
			}
		})
	}
	few, many := allocs(10), allocs(2000)
	t.Logf("allocations per pair of URLs: %.0f among 11 downstreams, %.0f among 2,001", few, many)
	// A scan allocates for every downstream (thousands here); the race
	// detector and the error's text may add one or two either way.
	if many > 2*few {
		t.Fatalf("resolving a URL allocates %.0f times among 2,001 downstreams, %.0f among 11; want about as many", many, few)
	}
}

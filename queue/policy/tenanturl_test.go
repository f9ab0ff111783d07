package policy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
)

// TestTenantBaseURLErrors: {tenant} is allowed once, as a whole host
// label with two labels after it (or {tenant}.localhost) or a whole path
// segment; anything else is an error at the base_url's line and column
// that says what to write.
func TestTenantBaseURLErrors(t *testing.T) {
	file := func(base string) []byte {
		return doc("queue: {bound: 10}", "downstreams:", "  s:", "    rate: 1", "    base_url: '"+base+"'")
	}
	for _, c := range []struct{ base, want string }{
		{"https://{tenant}.{tenant}.example.com/", "{tenant} may appear once, got 2"},
		{"https://a.example.com/{tenant}/{tenant}/", "{tenant} may appear once, got 2"},
		{"https://{tenant}.example.com/{tenant}/", "{tenant} may appear once, got 2"},
		{"https://shop-{tenant}.example.com/", `{tenant} must be a whole label of the host, as in https://{tenant}.myshopify.com/; got "shop-{tenant}.example.com"`},
		{"https://{tenant}x.example.com/", "{tenant} must be a whole label of the host"},
		{"https://{tenant}.com/", `{tenant} needs two labels or more after it, as in {tenant}.myshopify.com: in "{tenant}.com" a tenant would choose the domain itself`},
		{"https://example.{tenant}/", "{tenant} needs two labels or more after it"},
		{"https://{tenant}.com./", `a host with {tenant} must have no empty label (no dot first, last or next to another), got "{tenant}.com."`},
		{"https://{tenant}..example.com/", "a host with {tenant} must have no empty label"},
		{"http://{tenant}.localhost:8080/", ""},
		{"http://{tenant}.localhost./", "a host with {tenant} must have no empty label"},
		{"http://{tenant}.a.localhost/", ""},
		{"https://{tenant}/", "{tenant} needs two labels or more after it"},
		{"https://{tenant}.0.0.1/", `{tenant} cannot be part of an IP address, got "{tenant}.0.0.1"`},
		{"https://[{tenant}::1]/", "{tenant} cannot be part of an IP address"},
		{"https://example.com:{tenant}/", "{tenant} cannot be the port"},
		{"https://{tenant}@example.com/", "{tenant} may only be a label of the host or a segment of the path, not in the user info"},
		{"https://example.com/hooks-{tenant}/", `{tenant} must be a whole segment of the path, as in https://hooks.example.com/{tenant}/; got "/hooks-{tenant}/"`},
		{"https://example.com/{tenant}.json", "{tenant} must be a whole segment of the path"},
		{"https://example.com/x?t={tenant}", "{tenant} may only be a label of the host or a segment of the path, not in the query or fragment"},
		{"{tenant}://example.com/", "{tenant} may only be a label of the host or a segment of the path"},
		{"https://{Tenant}.example.com/", `"{Tenant}": did you mean "{tenant}"? (in lower case)`},
		{"https://{TENANT}.example.com/", `"{TENANT}": did you mean "{tenant}"? (in lower case)`},
		{"https://{tennat}.example.com/", `"{tennat}": did you mean "{tenant}"?`},
		{"https://{tenants}.example.com/", `"{tenants}": did you mean "{tenant}"?`},
		{"https://{{tenant}}.example.com/", `"{{tenant}": did you mean "{tenant}"?`},
		{"https://{store}.myshopify.com/", `"{store}": only {tenant} may be written in braces, which the job's tenant fills`},
		{"https://hooks.example.com/{id}/", `"{id}": only {tenant} may be written in braces`},
		{"https://hooks.example.com/a}/", "a } without its {"},
		{"https://${tenant}.example.com/", "a base_url takes no ${VAR} (environment variables are for headers)"},
		{"https://hooks.example.com/%7Btenant%7D/", "write {tenant} as it is, not percent-encoded (%7Btenant%7D)"},
		{"https://{tenant}.sluice-tenant-0f3a9c.com/", `must not hold "sluice-tenant-0f3a9c"`},
		// The URL rules still hold, {tenant} shown as written.
		{"https://{tenant}.example.com/api/../admin", `"https://{tenant}.example.com/api/../admin" has a . or .. path segment`},
		{"https://u@{tenant}.example.com/", `"https://{tenant}.example.com/" carries user info`},
		{"https://{tenant}.example.com/?x=1", "must not have a query"},
		{"https://{tenant}.example.com:99999/", `"https://{tenant}.example.com:99999/": port "99999" must be between 1 and 65535`},
		{"https://hooks.example.com/{tenant}/x;y", `"https://hooks.example.com/{tenant}/x;y" has a ; in its path`},
	} {
		_, err := Parse(file(c.base))
		want := "line 5:15: downstreams.s.base_url: " + c.want
		if c.want == "" && err != nil {
			t.Errorf("base_url %s: %v", c.base, err)
		} else if c.want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("base_url %s: %v\nwant %s", c.base, err, want)
		}
	}
}

// TestTenantBaseURLParsed: a {tenant} base_url keeps {tenant} where it
// is written, in the host or in the path.
func TestTenantBaseURLParsed(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  shopify: {rate: 2, per_tenant: true, base_url: \"https://{tenant}.MyShopify.com/admin/api/\"}",
		"  hooks: {rate: 2, base_url: \"https://hooks.example.com/in/{tenant}/v1\"}",
		"  port: {rate: 2, base_url: \"http://{tenant}.localhost:8080/\"}",
	))
	for name, want := range map[string]string{
		"shopify": "https://{tenant}.myshopify.com/admin/api/",
		"hooks":   "https://hooks.example.com/in/{tenant}/v1",
		"port":    "http://{tenant}.localhost:8080/",
	} {
		u := cfg.Downstreams[name].BaseURL
		if got := strings.Replace(u.Scheme+"://"+u.Host+u.EscapedPath(), tenantEscaped, tenantVar, 1); got != want {
			t.Errorf("%s: BaseURL %s, want %s", name, got, want)
		}
	}
	if got := cfg.Downstreams["hooks"].BaseURL.Path; got != "/in/{tenant}/v1" {
		t.Errorf("hooks: Path %q", got)
	}
}

// TestDownstreamForTenant: a {tenant} base_url covers the job's own
// tenant's host or path and nothing else: not another tenant's, and not
// for a tenant that is no host label or safe path segment, whatever it
// hides; the rest of the URL is held to the rules of DownstreamFor.
func TestDownstreamForTenant(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 1}",
		"downstreams:",
		"  shopify: {rate: 1, base_url: \"https://{tenant}.myshopify.com/admin/api/\"}",
		"  shopify-graphql: {rate: 1, base_url: \"https://{tenant}.myshopify.com/admin/api/graphql.json\"}",
		"  deep: {rate: 1, base_url: \"https://api.{tenant}.example.net:8443/\"}",
		"  hooks: {rate: 1, base_url: \"https://hooks.example.com/in/{tenant}/\"}",
		"  hooks-v2: {rate: 1, base_url: \"https://hooks.example.com/in/{tenant}/v2\"}",
		"  rooted: {rate: 1, base_url: \"http://r.example.com/{tenant}\"}",
		"  plain: {rate: 1, base_url: https://hooks.example.com/status/}",
		"  other: {rate: 1, base_url: https://other.example.org/}",
	))
	tests := []struct {
		tenant, url string
		want        string // downstream name; "" for refused
	}{
		{"acme", "https://acme.myshopify.com/admin/api/2024-01/orders.json?limit=5", "shopify"},
		{"acme", "https://ACME.myshopify.com/admin/api/orders.json", "shopify"},
		{"acme", "https://acme.myshopify.com:443/admin/api/", "shopify"},
		{"acme", "https://acme.myshopify.com/admin/api", "shopify"},
		{"acme", "https://acme.myshopify.com/admin/api/graphql.json", "shopify-graphql"},
		{"acme-eu-2", "https://acme-eu-2.myshopify.com/admin/api/x", "shopify"},
		{"7", "https://7.myshopify.com/admin/api/x", "shopify"},
		{"acme", "https://api.acme.example.net:8443/x", "deep"},
		{"acme", "https://hooks.example.com/in/acme/", "hooks"},
		{"acme", "https://hooks.example.com/in/acme", "hooks"},
		{"acme", "https://hooks.example.com/in/acme/orders/7", "hooks"},
		{"acme", "https://hooks.example.com/in/acme/v2/x", "hooks-v2"},
		{"acme_eu.2", "https://hooks.example.com/in/acme_eu.2/x", "hooks"},
		{"acme", "http://r.example.com/acme/x", "rooted"},
		{"acme", "https://hooks.example.com/status/x", "plain"},
		{"", "https://other.example.org/x", "other"},
		{"Any One/..", "https://other.example.org/x", "other"},

		// Another tenant's host or path.
		{"acme", "https://bob.myshopify.com/admin/api/x", ""},
		{"acme", "https://acme2.myshopify.com/admin/api/x", ""},
		{"acme", "https://acm.myshopify.com/admin/api/x", ""},
		{"acme", "https://api.bob.example.net:8443/x", ""},
		{"acme", "https://hooks.example.com/in/bob/", ""},
		{"acme", "https://hooks.example.com/in/acme2/x", ""},
		{"acme", "https://hooks.example.com/in/ACME/x", ""},
		{"acme", "https://hooks.example.com/in/%61cme/x", ""},
		{"acme", "http://r.example.com/bob", ""},
		// Not the base_url's other parts.
		{"acme", "https://acme.myshopify.com/admin/apiX", ""},
		{"acme", "https://acme.myshopify.com/", ""},
		{"acme", "http://acme.myshopify.com/admin/api/x", ""},
		{"acme", "https://acme.myshopify.com:8443/admin/api/x", ""},
		{"acme", "https://api.acme.example.net/x", ""},
		{"acme", "https://acme.myshopify.com./admin/api/x", ""},
		{"acme", "https://x.acme.myshopify.com/admin/api/x", ""},
		{"acme", "https://acme.myshopify.com.evil.com/admin/api/x", ""},
		{"acme", "https://acme.evil.com/admin/api/x", ""},
		{"acme", "https://hooks.example.com/in/", ""},
		{"acme", "https://hooks.example.com/in", ""},
		{"acme", "https://hooks.example.com/in//acme/", ""},
		{"acme", "https://hooks.example.com/in/acme/v2x", "hooks"}, // under in/acme/, not in/acme/v2
		{"acme", "https://user@acme.myshopify.com/admin/api/x", ""},
		{"acme", "https://acme.myshopify.com/admin/api/../../x", ""},
		{"acme", "https://acme.myshopify.com/admin/api/%2e%2e/x", ""},
		{"acme", "https://hooks.example.com/in/acme/..%2f..%2fbob/x", ""},
		{"acme", "https://hooks.example.com/in/acme%2f..%2fbob/x", ""},
		{"acme", "https://hooks.example.com/in/acme;/x", ""},
		{"acme", "https://acme.myshopify.com\\@evil.com/admin/api/", ""},
		{"acme", "https://{tenant}.myshopify.com/admin/api/x", ""},
		{"acme", "https://hooks.example.com/in/{tenant}/x", ""},
		{"acme", "https://hooks.example.com/in/%7Btenant%7D/x", ""},

		// Hostile tenants, each on the URL it would aim at.
		{"", "https://.myshopify.com/admin/api/x", ""},
		{"", "https://hooks.example.com/in//x", ""},
		{"bob.evil.com", "https://bob.evil.com.myshopify.com/admin/api/x", ""},
		{"acme.myshopify.com/admin/api/x?", "https://acme.myshopify.com/admin/api/x", ""},
		{"ACME", "https://acme.myshopify.com/admin/api/x", ""},
		{"Acme", "https://acme.myshopify.com/admin/api/x", ""},
		{"Acme", "https://hooks.example.com/in/acme/x", ""},
		{"Acme", "https://hooks.example.com/in/Acme/x", ""},
		{"ａcme", "https://acme.myshopify.com/admin/api/x", ""}, // a fullwidth a
		{"café", "https://café.myshopify.com/admin/api/x", ""},
		{"café", "https://hooks.example.com/in/café/x", ""},
		{"-acme", "https://-acme.myshopify.com/admin/api/x", ""},
		{"acme-", "https://acme-.myshopify.com/admin/api/x", ""},
		{strings.Repeat("a", 64), "https://" + strings.Repeat("a", 64) + ".myshopify.com/admin/api/x", ""},
		{"acme_eu", "https://acme_eu.myshopify.com/admin/api/x", ""},
		{"..", "https://hooks.example.com/in/../x", ""},
		{".", "https://hooks.example.com/in/./x", ""},
		{"...", "https://hooks.example.com/in/.../x", ""},
		{"acme.", "https://hooks.example.com/in/acme./x", ""},
		{".acme", "https://hooks.example.com/in/.acme/x", ""},
		{"a..b", "https://hooks.example.com/in/a..b/x", ""},
		{"bob/x", "https://hooks.example.com/in/bob/x", ""},
		{"..%2fbob", "https://hooks.example.com/in/..%2fbob/x", ""},
		{"%2e%2e", "https://hooks.example.com/in/%2e%2e/x", ""},
		{"acme%2f..", "https://hooks.example.com/in/acme%2f../x", ""},
		{"a%62", "https://hooks.example.com/in/a%62/x", ""},
		{"a;b", "https://hooks.example.com/in/a;b/x", ""},
		{"a\\b", "https://hooks.example.com/in/a\\b/x", ""},
		{"a\x00b", "https://hooks.example.com/in/a%00b/x", ""},
		{"a\nb", "https://hooks.example.com/in/a%0Ab/x", ""},
		{"a b", "https://hooks.example.com/in/a%20b/x", ""},
		{"a~b", "https://hooks.example.com/in/a~b/x", ""},
		{"a\xffb", "https://hooks.example.com/in/a%FFb/x", ""},
		{strings.Repeat("a", 256), "https://hooks.example.com/in/" + strings.Repeat("a", 256) + "/x", ""},
	}
	for _, tt := range tests {
		d, err := cfg.DownstreamForTenant(tt.tenant, tt.url)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("DownstreamForTenant(%q, %q) = %s, want refused", tt.tenant, tt.url, d.Name)
		case tt.want == "" && !errors.Is(err, ErrURLNotAllowed):
			t.Errorf("DownstreamForTenant(%q, %q) error %v does not wrap ErrURLNotAllowed", tt.tenant, tt.url, err)
		case tt.want != "" && err != nil:
			t.Errorf("DownstreamForTenant(%q, %q): %v, want %s", tt.tenant, tt.url, err, tt.want)
		case tt.want != "" && d.Name != tt.want:
			t.Errorf("DownstreamForTenant(%q, %q) = %s, want %s", tt.tenant, tt.url, d.Name, tt.want)
		}
	}
	// Without a tenant, {tenant} covers nothing.
	if _, err := cfg.DownstreamFor("https://acme.myshopify.com/admin/api/x"); !errors.Is(err, ErrTenantURL) {
		t.Errorf("DownstreamFor without a tenant: %v", err)
	}
	if d, err := cfg.DownstreamFor("https://other.example.org/x"); err != nil || d.Name != "other" {
		t.Errorf("DownstreamFor(other) = %s, %v", d.Name, err)
	}
}

// TestDownstreamForTenantMessages: a refusal for the tenant says which
// base_url, whose host or path the URL is, and why the tenant cannot
// fill {tenant}; it wraps ErrTenantURL.
func TestDownstreamForTenantMessages(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 1}",
		"downstreams:",
		"  shopify: {rate: 1, base_url: \"https://{tenant}.myshopify.com/admin/\"}",
		"  hooks: {rate: 1, base_url: \"https://hooks.example.com/{tenant}/\"}",
	))
	const host = `URL not allowed for the job's tenant: tenant %q cannot fill {tenant} in downstream "shopify"'s base_url "https://{tenant}.myshopify.com/admin/": %s; a tenant in a host is 1 to 63 of a-z, 0-9 and -, not starting or ending with -`
	const path = `URL not allowed for the job's tenant: tenant %q cannot fill {tenant} in downstream "hooks"'s base_url "https://hooks.example.com/{tenant}/": %s; a tenant in a path is 1 to 255 of a-z, 0-9, -, _ and ., with no . first, last or next to another`
	for _, c := range []struct{ tenant, url, want string }{
		{"acme", "https://bob.myshopify.com/admin/x?token=secret",
			`URL not allowed for the job's tenant: "https://bob.myshopify.com/admin/x" is not tenant "acme"'s host: downstream "shopify"'s base_url "https://{tenant}.myshopify.com/admin/" gives it "acme.myshopify.com"`},
		{"acme", "https://hooks.example.com/bob/x?token=secret",
			`URL not allowed for the job's tenant: "https://hooks.example.com/bob/x" is not under tenant "acme"'s path: downstream "hooks"'s base_url "https://hooks.example.com/{tenant}/" gives it "/acme/"`},
		{"Acme", "https://acme.myshopify.com/admin/x", fmt.Sprintf(host, "Acme", `it has upper-case letters, which sluice refuses rather than folds: "Acme" and "acme" are two tenants but would be one host`)},
		{"Acme", "https://hooks.example.com/acme/x", fmt.Sprintf(path, "Acme", `it has upper-case letters, which sluice refuses rather than folds: a server that ignores case would take "Acme"'s path for "acme"'s`)},
		{"", "https://acme.myshopify.com/admin/x", fmt.Sprintf(host, "", "the job has no tenant")},
		{"a.b", "https://a.b.myshopify.com/admin/x", `URL not allowed: no downstream's base_url covers "https://a.b.myshopify.com/admin/x"`},
		{"a.b", "https://b.myshopify.com/admin/x", fmt.Sprintf(host, "a.b", `it holds '.'`)},
		{"café", "https://caf.myshopify.com/admin/x", fmt.Sprintf(host, "café", `it holds '\u00e9', which is not ASCII (write the tenant's punycode, such as xn--caf-dma, for an IDN)`)},
		{"-a", "https://a.myshopify.com/admin/x", fmt.Sprintf(host, "-a", "it starts or ends with a hyphen")},
		{"Acme.b", "https://b.myshopify.com/admin/x", fmt.Sprintf(host, "Acme.b", `it holds '.'`)},
		{"\u212acme", "https://kcme.myshopify.com/admin/x", fmt.Sprintf(host, "\u212acme", `it holds '\u212a', which is not ASCII (write the tenant's punycode, such as xn--caf-dma, for an IDN)`)},
		{strings.Repeat("a", 64), "https://a.myshopify.com/admin/x", fmt.Sprintf(host, strings.Repeat("a", 64), "it is 64 bytes long, more than a host label's 63")},
		{"..", "https://hooks.example.com/acme/x", fmt.Sprintf(path, "..", "it starts or ends with a dot, or has two in a row")},
		{"a/b", "https://hooks.example.com/a/b", fmt.Sprintf(path, "a/b", `it holds '/'`)},
		{"a%2fb", "https://hooks.example.com/a/b", fmt.Sprintf(path, "a%2fb", `it holds '%'`)},
		{"a\nb", "https://hooks.example.com/a/b", fmt.Sprintf(path, "a\nb", `it holds '\n'`)},
	} {
		_, err := cfg.DownstreamForTenant(c.tenant, c.url)
		if err == nil || err.Error() != c.want {
			t.Errorf("DownstreamForTenant(%q, %q) = %v\nwant %s", c.tenant, c.url, err, c.want)
		}
		if err != nil && !strings.Contains(c.want, "no downstream") && !errors.Is(err, ErrTenantURL) {
			t.Errorf("DownstreamForTenant(%q, %q) = %v, not an ErrTenantURL", c.tenant, c.url, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error quotes the query: %v", err)
		}
	}
}

// TestCheckJobTenant: a sluice.http job whose URL is not its own
// tenant's under a {tenant} base_url is refused at enqueue, by CheckJob
// and so by a Producer of QueueConfig, as an ErrInvalidJob.
func TestCheckJobTenant(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  shopify: {rate: 2, burst: 40, per_tenant: true, base_url: \"https://{tenant}.myshopify.com/admin/api/\"}",
		"  hooks: {rate: 20, base_url: \"https://hooks.example.com/{tenant}/\"}",
	))
	job := func(tenant, downstream, url string) queue.Job {
		return queue.Job{Tenant: tenant, Type: "sluice.http", Downstream: downstream, Payload: []byte(`{"url":"` + url + `"}`)}
	}
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), &qc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		job  queue.Job
		want string // "" to pass
	}{
		{job("acme", "shopify", "https://acme.myshopify.com/admin/api/orders.json"), ""},
		{job("bob", "shopify", "https://bob.myshopify.com/admin/api/orders.json"), ""},
		{job("acme", "hooks", "https://hooks.example.com/acme/orders"), ""},
		{job("acme", "shopify", "https://bob.myshopify.com/admin/api/orders.json"), `is not tenant "acme"'s host`},
		{job("acme", "hooks", "https://hooks.example.com/bob/orders"), `is not under tenant "acme"'s path`},
		{job("Acme", "shopify", "https://acme.myshopify.com/admin/api/orders.json"), "upper-case letters"},
		{job("a.b", "hooks", "https://hooks.example.com/a.b/x"), ""},
		{job("../b", "hooks", "https://hooks.example.com/b/x"), `tenant "../b" cannot fill {tenant}`},
		{job("acme", "hooks", "https://acme.myshopify.com/admin/api/orders.json"), `the url belongs to downstream "shopify", not "hooks"`},
	} {
		err := cfg.CheckJob(&c.job)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("tenant %q, %s: refused: %v", c.job.Tenant, c.job.Payload, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrURLNotAllowed)):
			t.Errorf("tenant %q, %s: %v; want an ErrURLNotAllowed with %q", c.job.Tenant, c.job.Payload, err, c.want)
		case c.want != "":
			if err := p.Check(c.job); !errors.Is(err, queue.ErrInvalidJob) || !errors.Is(err, ErrURLNotAllowed) {
				t.Errorf("tenant %q, %s: Producer.Check = %v; want ErrInvalidJob and ErrURLNotAllowed", c.job.Tenant, c.job.Payload, err)
			}
		}
	}
}

// TestTenantOverlaps: a base_url through which one tenant could call
// another's host or path is refused at its line: a host that a {tenant}
// host gives some tenant, two {tenant} hosts that give one host to two
// tenants, and on one origin a path above or inside a {tenant} segment,
// or {tenant} segments at different depths. Paths beside a {tenant}
// segment, the same pattern on other paths and other hosts of the domain
// are fine.
func TestTenantOverlaps(t *testing.T) {
	q := "queue: {bound: 1}\ndownstreams:\n"
	for _, c := range []struct {
		name string
		a, b string // base_urls, lines 3 and 4
		want string // the error of line 4 (or 3), "" to pass
	}{
		{"host given to a tenant", "https://{tenant}.myshopify.com/admin/", "https://acme.myshopify.com/admin/",
			`line 4:26: downstreams.b.base_url: the host "acme.myshopify.com" is the one that downstreams.a's base_url (line 3) gives tenant "acme", so every tenant could call it`},
		{"host given to a tenant, listed first", "https://acme.myshopify.com/other/", "http://{tenant}.myshopify.com:8080/",
			`line 3:26: downstreams.a.base_url: the host "acme.myshopify.com" is the one that downstreams.b's base_url (line 4) gives tenant "acme"`},
		{"path template on a tenant's host", "https://{tenant}.example.com/", "https://hooks.example.com/{tenant}/",
			`line 4:26: downstreams.b.base_url: the host "hooks.example.com" is the one that downstreams.a's base_url (line 3) gives tenant "hooks"`},
		{"tenant in two labels", "https://{tenant}.b.example.com/", "https://x.{tenant}.example.com/",
			`line 4:26: downstreams.b.base_url: the host "x.b.example.com" would be tenant "b"'s through this downstream and tenant "x"'s through downstreams.a's base_url (line 3): {tenant} must be the same label of hosts that could be one`},
		{"root above a tenant path", "https://hooks.example.com/", "https://hooks.example.com/{tenant}/",
			`line 3:26: downstreams.a.base_url: its path covers, or lies in, the tenants' paths of downstreams.b's base_url (line 4)`},
		{"same path above a tenant path", "https://hooks.example.com/in/{tenant}", "https://hooks.example.com:443/in",
			`line 4:26: downstreams.b.base_url: its path covers, or lies in, the tenants' paths of downstreams.a's base_url (line 3)`},
		{"a path in a tenant's", "https://hooks.example.com/in/{tenant}/", "https://hooks.example.com/in/acme/x",
			`line 4:26: downstreams.b.base_url: its path covers, or lies in, the tenants' paths of downstreams.a's base_url (line 3)`},
		{"tenant at two depths", "https://hooks.example.com/{tenant}/", "https://hooks.example.com/in/{tenant}/",
			`line 4:26: downstreams.b.base_url: its {tenant} is at another depth of the same path as that of downstreams.a's base_url (line 3)`},
		{"same template twice", "https://{tenant}.example.com/a/", "https://{tenant}.example.com:443/a",
			`line 4:26: downstreams.b.base_url: the same base_url as downstreams.a (line 3)`},

		{"beside a tenant path", "https://hooks.example.com/in/{tenant}/", "https://hooks.example.com/status/", ""},
		{"beside on a boundary", "https://hooks.example.com/in/{tenant}/", "https://hooks.example.com/inx/", ""},
		{"one depth, two paths", "https://hooks.example.com/in/{tenant}/a", "https://hooks.example.com/in/{tenant}/b", ""},
		{"one host pattern, two paths", "https://{tenant}.example.com/a/", "https://{tenant}.example.com/b/", ""},
		{"the domain itself", "https://{tenant}.myshopify.com/", "https://myshopify.com/", ""},
		{"deeper host", "https://{tenant}.myshopify.com/", "https://x.acme.myshopify.com/", ""},
		{"other scheme, one host pattern", "https://{tenant}.example.com/", "http://{tenant}.example.com/", ""},
		{"tenant in two labels of hosts that differ", "https://{tenant}.b.example.com/", "https://x.{tenant}.example.org/", ""},
		{"other origin", "https://hooks.example.com/{tenant}/", "https://hooks.example.com:8443/", ""},
	} {
		data := []byte(q + "  a: {rate: 1, base_url: \"" + c.a + "\"}\n  b: {rate: 1, base_url: \"" + c.b + "\"}\n")
		_, err := Parse(data)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
}

// TestDownstreamForTenantIsALookup: with {tenant} hosts and paths among
// the base_urls, resolving a URL still costs the same whatever the number
// of downstreams: a {tenant} host is found by one lookup per label of the
// URL's host, not by a scan of the downstreams.
func TestDownstreamForTenantIsALookup(t *testing.T) {
	allocs := func(n int) float64 {
		lines := []string{"queue: {bound: 1}", "downstreams:"}
		for i := range n {
			lines = append(lines,
				fmt.Sprintf("  h%d: {rate: 1, base_url: \"https://{tenant}.h%d.example.com/v1/\"}", i, i),
				fmt.Sprintf("  p%d: {rate: 1, base_url: \"https://p%d.example.com/in/{tenant}/\"}", i, i))
		}
		cfg := mustParse(t, doc(lines...))
		return testing.AllocsPerRun(20, func() {
			if d, err := cfg.DownstreamForTenant("acme", "https://acme.h0.example.com/v1/x"); err != nil || d.Name != "h0" {
				t.Fatalf("DownstreamForTenant(h0): %v, %v", d.Name, err)
			}
			if d, err := cfg.DownstreamForTenant("acme", "https://p0.example.com/in/acme/x"); err != nil || d.Name != "p0" {
				t.Fatalf("DownstreamForTenant(p0): %v, %v", d.Name, err)
			}
			if _, err := cfg.DownstreamForTenant("acme", "https://a.nowhere.example.com/"); err == nil {
				t.Fatal("a URL of no downstream's host was allowed")
			}
		})
	}
	few, many := allocs(5), allocs(1000)
	t.Logf("allocations per three URLs: %.0f among 10 downstreams, %.0f among 2,000", few, many)
	// A scan allocates for every downstream (thousands here); the race
	// detector and the errors' text may add one or two either way.
	if many > 2*few {
		t.Fatalf("resolving a URL allocates %.0f times among 2,000 downstreams, %.0f among 10; want about as many", many, few)
	}
}

// TestDownstreamForTenantBuiltInCode: a Config made by hand writes
// {tenant} in its BaseURL's Host or Path, and resolves as a parsed one.
func TestDownstreamForTenantBuiltInCode(t *testing.T) {
	host, err := parseBaseURL("https://{tenant}.a.example.com/x/")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Downstreams: map[string]queue.Downstream{
		"host": {Name: "host", BaseURL: host},
		"path": {Name: "path", BaseURL: &url.URL{Scheme: "https", Host: "b.example.com", Path: "/in/{tenant}/"}},
	}}
	for _, c := range []struct{ tenant, url, want string }{
		{"acme", "https://acme.a.example.com/x/y", "host"},
		{"acme", "https://b.example.com/in/acme/y", "path"},
		{"acme", "https://bob.a.example.com/x/y", ""},
		{"acme", "https://b.example.com/in/bob/y", ""},
	} {
		d, err := cfg.DownstreamForTenant(c.tenant, c.url)
		if c.want == "" && !errors.Is(err, ErrTenantURL) || c.want != "" && (err != nil || d.Name != c.want) {
			t.Errorf("DownstreamForTenant(%q, %q) = %s, %v; want %q", c.tenant, c.url, d.Name, err, c.want)
		}
	}
}

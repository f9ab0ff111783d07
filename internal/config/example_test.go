package config_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/config"
)

func ExampleParse() {
	cfg, err := config.Parse([]byte(`
queue:
  bound: 1000
downstreams:
  shopify:
    base_url: https://example.myshopify.com/admin/api/
    rate: 2
    burst: 40
    per_tenant: true
tenants:
  default:
    algorithm: token_bucket
    limit: 100
    period: 1m
  acme:
    algorithm: sliding_window_log
    limit: 10
    period: 1s
    weight: 2
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	acme, _ := cfg.TenantPolicy("acme")
	other, _ := cfg.TenantPolicy("globex")
	fmt.Println(acme.ID, acme.Policy, "weight", acme.Weight)
	fmt.Println(other.ID, other.Policy, "weight", other.Weight)

	d, err := cfg.DownstreamFor("https://example.myshopify.com/admin/api/2024-01/orders.json")
	fmt.Println(d.Name, d.Limit.Rate, "per", d.Limit.Per, "burst", d.Limit.Burst, err)
	_, err = cfg.DownstreamFor("https://example.myshopify.com/admin/apiX")
	fmt.Println(err)
	// Output:
	// acme sliding_window_log 10/1s weight 2
	// default token_bucket 100/1m0s weight 1
	// shopify 2 per 1s burst 40 <nil>
	// sluice: URL not allowed: no downstream's base_url covers "https://example.myshopify.com/admin/apiX"
}

func ExampleParse_errors() {
	_, err := config.Parse([]byte(`queue:
  bound: 1000
downstreams:
  shopify:
    rate: 0
tenants:
  acme:
    algorithm: gcra
    limt: 10
  acme:
    weight: 2
`))
	fmt.Println(err)
	// Output:
	// line 5:11: downstreams.shopify.rate: must be at least 1, got 0
	// line 9:5: tenants.acme.limt: unknown field; did you mean "limit"?
	// line 10:3: tenants.acme: defined twice: first at line 7, again at line 10
}

package policy_test

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// A program that runs its own queue.Server or queue.Producer reads the
// same policy file as the commands; Load does the same from a path.
func ExampleParse() {
	cfg, err := policy.Parse([]byte(`
queue:
  bound: 1000
downstreams:
  shopify:
    base_url: https://{tenant}.myshopify.com/admin/api/
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
	shop := cfg.Downstreams["shopify"]
	fmt.Println("shopify:", shop.Limit.Rate, "per", shop.Limit.Per, "burst", shop.Limit.Burst, "max_wait", shop.Limit.MaxWait)

	acme, _ := cfg.TenantPolicy("acme")
	other, _ := cfg.TenantPolicy("globex") // not listed: the default entry
	fmt.Println(acme.ID, acme.Policy, "weight", acme.Weight)
	fmt.Println(other.ID, other.Policy, "weight", other.Weight)

	// Each store is a tenant, with a host of its own.
	d, err := cfg.DownstreamForTenant("acme", "https://acme.myshopify.com/admin/api/2024-01/orders.json")
	fmt.Println(d.Name, err)
	_, err = cfg.DownstreamForTenant("acme", "https://acme.myshopify.com/admin/apiX")
	fmt.Println(err)
	_, err = cfg.DownstreamForTenant("acme", "https://globex.myshopify.com/admin/api/orders.json")
	fmt.Println(errors.Is(err, policy.ErrTenantURL), err)

	qc := cfg.QueueConfig() // for queue.NewProducer and queue.NewServer
	fmt.Println("queue", qc.Queue, "bound", qc.Bound)
	// Output:
	// shopify: 2 per 1s burst 40 max_wait 10s
	// acme sliding_window_log 10/1s weight 2
	// default token_bucket 100/1m0s weight 1
	// shopify <nil>
	// URL not allowed: no downstream's base_url covers "https://acme.myshopify.com/admin/apiX"
	// true URL not allowed for the job's tenant: "https://globex.myshopify.com/admin/api/orders.json" is not tenant "acme"'s host: downstream "shopify"'s base_url "https://{tenant}.myshopify.com/admin/api/" gives it "acme.myshopify.com"
	// queue default bound 1000
}

// A refused file: every problem, in the file's order, with its line,
// column and field.
func ExampleParse_errors() {
	_, err := policy.Parse([]byte(`queue:
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

	var first *policy.Error
	if errors.As(err, &first) {
		fmt.Printf("first problem: line %d, field %s\n", first.Line, first.Field)
	}
	// Output:
	// line 5:11: downstreams.shopify.rate: must be at least 1, got 0
	// line 9:5: tenants.acme.limt: unknown field; did you mean "limit"?
	// line 10:3: tenants.acme: defined twice: first at line 7, again at line 10
	// first problem: line 5, field downstreams.shopify.rate
}

// CheckJob, which QueueConfig installs as queue.Config.Check, refuses at
// enqueue a job that these workers could never run.
func ExampleConfig_CheckJob() {
	cfg, err := policy.Parse([]byte(`
queue:
  bound: 1000
downstreams:
  openai:
    rate: 1000
    burst: 500
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.CheckJob(&queue.Job{Tenant: "acme", Type: "summarise", Downstream: "openai", Cost: 400}))
	fmt.Println(cfg.CheckJob(&queue.Job{Tenant: "acme", Type: "summarise", Downstream: "openai", Cost: 900}))
	fmt.Println(cfg.CheckJob(&queue.Job{Tenant: "acme", Type: "summarise", Downstream: "anthropic"}))
	// Output:
	// <nil>
	// cost 900 exceeds downstream "openai"'s burst of 500, so no slot could ever hold it
	// unknown downstream "anthropic": the policy file has no such downstream
}

// Load's errors start with the path it was given.
func ExampleLoad() {
	_, err := policy.Load("no-such-policy.yaml")
	fmt.Println(err)
	// Output:
	// no-such-policy.yaml: open: no such file or directory
}

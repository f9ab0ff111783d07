package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/queue"
)

// TestCostFrom: where a downstream's responses report a call's real
// cost, a header field or a dotted path into a JSON body.
func TestCostFrom(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  llm:",
		"    rate: 90000",
		"    per: 1m",
		"    burst: 20000",
		"    cost_from: json:usage.total_tokens",
		"  shop:",
		"    rate: 50",
		"    burst: 1000",
		"    cost_from: header:x-cost-used",
		"  plain:",
		"    rate: 10",
	))
	want := map[string]queue.CostFrom{
		"llm":   {JSON: []string{"usage", "total_tokens"}},
		"shop":  {Header: "X-Cost-Used"},
		"plain": {},
	}
	for name, cf := range want {
		if got := cfg.Downstreams[name].CostFrom; !reflect.DeepEqual(got, cf) {
			t.Errorf("%s: CostFrom = %+v; want %+v", name, got, cf)
		}
	}
	if s := cfg.Downstreams["llm"].CostFrom.String(); s != "json:usage.total_tokens" {
		t.Errorf("String() = %q", s)
	}
}

// TestCostFromErrors: each problem of cost_from is placed at its value.
func TestCostFromErrors(t *testing.T) {
	const head = "queue: {bound: 10}\ndownstreams:\n  s:\n    rate: 10\n"
	tests := []struct{ name, line, want string }{
		{"no source", "    cost_from: X-Tokens-Used", `line 5:16: downstreams.s.cost_from: want header:<field> or json:<path>, such as header:X-Tokens-Used or json:usage.total_tokens, got "X-Tokens-Used"`},
		{"unknown source", "    cost_from: body:tokens", `line 5:16: downstreams.s.cost_from: unknown source "body"; want header or json`},
		{"empty header", "    cost_from: 'header:'", `line 5:16: downstreams.s.cost_from: "" is no header field name`},
		{"header with space", "    cost_from: header:X Tokens", `line 5:16: downstreams.s.cost_from: "X Tokens" is no header field name`},
		{"empty json key", "    cost_from: json:usage..total", `line 5:16: downstreams.s.cost_from: json path "usage..total" has an empty key; write keys joined by dots, such as usage.total_tokens`},
		{"json no path", "    cost_from: 'json:'", `line 5:16: downstreams.s.cost_from: json path "" has an empty key`},
		{"a list", "    cost_from: [header:X]", "line 5:16: downstreams.s.cost_from: must be a single value, got a list"},
		{"null", "    cost_from:", "line 5:15: downstreams.s.cost_from: has no value"},
		{"typo", "    cost_form: header:X", `line 5:5: downstreams.s.cost_form: unknown field; did you mean "cost_from"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(head + tt.line + "\n")
			cfg, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v\n--- file:\n%s", cfg, data)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
	_, err := Parse([]byte(head + "    cost_from: tokens\n"))
	if !errors.Is(err, queue.ErrCostFrom) {
		t.Errorf("errors.Is(%v, queue.ErrCostFrom) = false", err)
	}
}

// TestCheckJobUnits: a job's Units, when set, is what must fit the
// downstream's burst, not its Cost (which its tenant's admission counts).
func TestCheckJobUnits(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  llm: {rate: 1000, per: 1m, burst: 1000}",
	))
	if err := cfg.CheckJob(&queue.Job{Tenant: "a", Type: "t", Downstream: "llm", Cost: 1, Units: 1001}); err == nil || !strings.Contains(err.Error(), "units 1001 exceeds") {
		t.Errorf("units above the burst: %v", err)
	}
	if err := cfg.CheckJob(&queue.Job{Tenant: "a", Type: "t", Downstream: "llm", Cost: 5000, Units: 10}); err != nil {
		t.Errorf("a cost above the burst with units within it: %v", err)
	}
}

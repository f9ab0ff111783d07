package policy

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestAlso: a downstream's further limits, with their defaults, written
// as a block list and a flow list.
func TestAlso(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  llm:",
		"    rate: 90000",
		"    per: 1m",
		"    burst: 20000",
		"    also:",
		"      - {rate: 500, per: 1m, burst: 50, counts: calls}",
		"      - rate: 1_000_000",
		"        per: 24h",
		"        burst: 90000",
		"        counts: cost",
		"      - {rate: 1000, per: 1h, burst: 100}",
		"  api:",
		"    rate: 10",
		"    also: [{rate: 2}, {rate: 1000, per: 1h, burst: 100}, {rate: 1000, per: 1h, burst: 100, counts: calls}]",
		"  none:",
		"    rate: 10",
		"    also: []",
	))
	hourly := throttle.Rate{Rate: 1000, Per: time.Hour, Burst: 100}
	want := map[string][]throttle.Rate{
		"llm": {
			{Rate: 500, Per: time.Minute, Burst: 50, Counts: throttle.CountsCalls},
			{Rate: 1_000_000, Per: 24 * time.Hour, Burst: 90000, Counts: throttle.CountsCost},
			hourly,
		},
		"api": {
			{Rate: 2, Per: time.Second, Burst: 1},
			hourly,
			{Rate: 1000, Per: time.Hour, Burst: 100, Counts: throttle.CountsCalls},
		},
		"none": nil,
	}
	for name, also := range want {
		if got := cfg.Downstreams[name].Limit.Also; !reflect.DeepEqual(got, also) {
			t.Errorf("%s: Also = %+v; want %+v", name, got, also)
		}
	}
	if l := cfg.Downstreams["llm"].Limit; l.Rate != 90000 || l.Per != time.Minute || l.Burst != 20000 {
		t.Errorf("llm's own rate = %+v", l)
	}
}

// TestAlsoErrors: each problem of an also list is placed at its line and
// column, under the item's index (from 0).
func TestAlsoErrors(t *testing.T) {
	const head = "queue: {bound: 10}\ndownstreams:\n  s:\n    rate: 10\n"
	five := strings.Repeat("{rate: 1}, ", 4) + "{rate: 1}"
	tests := []struct {
		name string
		also string // lines after head, from line 5
		want string
	}{
		{"a mapping", "    also: {rate: 1}", "line 5:11: downstreams.s.also: must be a list of rates such as [{rate: 1000, per: 1h}], got a mapping"},
		{"a number", "    also: 5", "line 5:11: downstreams.s.also: must be a list of rates such as [{rate: 1000, per: 1h}], got the number 5"},
		{"null", "    also:", "line 5:10: downstreams.s.also: has no value"},
		{"item a number", "    also: [5]", "line 5:12: downstreams.s.also[0]: must be a mapping of keys to values, got the number 5"},
		{"item null", "    also:\n      - {rate: 1}\n      - ~", "line 7:9: downstreams.s.also[1]: must be a mapping of keys to values, got null"},
		{"rate zero", "    also: [{rate: 0}]", "line 5:19: downstreams.s.also[0].rate: must be at least 1, got 0"},
		{"rate missing", "    also:\n      - rate: 1\n      - per: 1h", "line 7:9: downstreams.s.also[1].rate: required: the units allowed per `per`, at least 1"},
		{"rate huge", "    also: [{rate: 2000000000000}]", "line 5:19: downstreams.s.also[0].rate: must be at most 1099511627776, got 2000000000000"},
		{"per bare", "    also: [{rate: 1, per: 60}]", "line 5:27: downstreams.s.also[0].per: a duration needs a unit, such as \"60s\" or \"60ms\"; got the number 60"},
		{"per fraction of µs", "    also: [{rate: 1, per: 1000500ns}]", "line 5:27: downstreams.s.also[0].per: must be a whole number of microseconds, got 1.0005ms"},
		{"per too long", "    also: [{rate: 1, per: 9000h}]", "line 5:27: downstreams.s.also[0].per: must be between 1ms and 8784h0m0s, got 9000h0m0s"},
		{"burst zero", "    also: [{rate: 1, burst: 0}]", "line 5:29: downstreams.s.also[0].burst: must be at least 1, got 0"},
		{"burst too fine", "    also:\n      - rate: 1\n        per: 8784h\n        burst: 1099511627776", "line 8:16: downstreams.s.also[0].burst: 1099511627776 units at 1 per 8784h0m0s is too fine-grained"},
		{"counts unknown", "    also: [{rate: 1, counts: tokens}]", "line 5:30: downstreams.s.also[0].counts: must be cost (the call's cost, the default) or calls (1 a call), got the string \"tokens\""},
		{"counts a list", "    also: [{rate: 1, counts: [calls]}]", "line 5:30: downstreams.s.also[0].counts: must be a single value, got a list"},
		{"unknown field", "    also: [{rate: 1, pre: 1h}]", "line 5:22: downstreams.s.also[0].pre: unknown field; did you mean \"per\"?"},
		{"max_wait in a rate", "    also: [{rate: 1, max_wait: 1s}]", "line 5:22: downstreams.s.also[0].max_wait: unknown field; expected one of rate, per, burst, counts"},
		{"duplicate field", "    also:\n      - rate: 1\n        rate: 2", "line 7:9: downstreams.s.also[0].rate: defined twice: first at line 6, again at line 7"},
		{"too many", "    also: [" + five + "]", fmt.Sprintf("line 5:11: downstreams.s.also: may list at most %d rates, got 5", throttle.MaxAlso)},
		{"typo", "    alzo: []", "line 5:5: downstreams.s.alzo: unknown field; did you mean \"also\"?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(head + tt.also + "\n")
			cfg, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v\n--- file:\n%s", cfg, data)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
	// The pace check's errors wrap ErrInvalidPolicy, as the downstream's own.
	_, err := Parse([]byte(head + "    also:\n      - {rate: 1, per: 8784h, burst: 1099511627776}\n"))
	if !errors.Is(err, algorithms.ErrInvalidPolicy) {
		t.Errorf("errors.Is(%v, ErrInvalidPolicy) = false", err)
	}
}

// TestCheckJobAlso: a cost above the burst of an also rate that counts
// the cost is refused at enqueue, naming the rate; a rate counting calls
// holds any cost.
func TestCheckJobAlso(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  llm:",
		"    rate: 90000",
		"    per: 1m",
		"    burst: 20000",
		"    also:",
		"      - {rate: 500, per: 1m, counts: calls}",
		"      - {rate: 1000000, per: 24h, burst: 8000}",
	))
	for _, c := range []struct {
		cost int64
		want string // "" to pass
	}{
		{1, ""},
		{8000, ""},
		{8001, `cost 8001 exceeds the burst of 8000 of downstream "llm"'s also[1] (1000000 per 24h0m0s, burst 8000)`},
		{20001, `cost 20001 exceeds downstream "llm"'s burst of 20000`},
	} {
		err := cfg.CheckJob(&queue.Job{Type: "x", Downstream: "llm", Cost: c.cost})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("cost %d: refused: %v", c.cost, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("cost %d: %v; want an error with %q", c.cost, err, c.want)
		case c.want != "" && !errors.Is(err, algorithms.ErrCostExceedsCapacity):
			t.Errorf("cost %d: %v does not wrap ErrCostExceedsCapacity", c.cost, err)
		}
	}
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/internal/vendorfake"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || len(o.cases) != len(cases) {
		t.Fatalf("defaults: %v %v", o.cases, err)
	}
	if o, err = parseFlags([]string{"-cases", "stripe, openai60,stripe"}); err != nil || strings.Join(o.cases, ",") != "stripe,openai60" {
		t.Errorf("a list: %v %v", o.cases, err)
	}
	for _, bad := range [][]string{{"-cases", "nope"}, {"-cases", ","}, {"-hook-rate", "0"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The job lines and policies the cases write are what the built binaries
// take.
func TestJobsAndPoliciesParse(t *testing.T) {
	url := "http://127.0.0.1:9"
	cfg, err := policy.Parse([]byte(sharedPolicy(url, "")))
	if err != nil {
		t.Fatalf("shared policy: %v", err)
	}
	for _, line := range []string{
		httpJob("", "store-3", "shopify", "GET", url+"/store-3/admin/api/2024-01/orders.json", ""),
		httpJob("w-1", "store-3", "shopify", "POST", url+"/store-3/admin/api/hook", `{"a":1}`),
	} {
		job, err := queue.ParseJob([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if err := cfg.CheckJob(&job); err != nil {
			t.Errorf("%s: the policy refuses it: %v", line, err)
		}
	}
	if _, err := policy.Parse([]byte(sharedPolicy(url, "20"))); err == nil {
		t.Log("this build's policy takes headroom: the shared-headroom row runs")
	}
}

func TestMeasure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixMicro() }
	arr := []vendorfake.Arrival{
		{At: at(0), Status: 200, Tokens: 10},
		{At: at(time.Second), Status: 429, Reason: "concurrency"},
		{At: at(6 * time.Second), Status: 429, Reason: "rate"},
		{At: at(7 * time.Second), Status: 529, Reason: "overloaded"},
		{At: at(9 * time.Second), Status: 200, Tokens: 5},
		{At: at(10 * time.Second), Status: 200, Tokens: 100}, // past the span
	}
	s := measure(arr, time.Time{}, 10*time.Second)
	if s.ok != 2 || s.tokens != 15 || s.refused != 2 || s.lateRefused != 1 || s.byReason["overloaded"] != 1 {
		t.Errorf("%+v", s)
	}
	if got := s.reasons(); got != "1 rate, 1 concurrency, 1 overloaded" {
		t.Errorf("reasons %q", got)
	}
	if !s.lastOK.Equal(t0.Add(9 * time.Second)) {
		t.Errorf("last ok %v", s.lastOK)
	}
}

func TestReportVerdicts(t *testing.T) {
	out := report([]row{
		{name: "a", target: "t", figure: "f", met: true},
		{name: "b", target: "t", figure: "f"},
		{name: "c", skipped: true, notes: []string{"why"}},
	})
	for _, want := range []string{"| a | t | f | met |", "| b | t | f | not met |", "| skipped |", "Note (c): why"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestRunFakeRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-vendor", "nope"},
		{"-vendor", "openai", "-listen", "0.0.0.0:0"},
		{"-vendor", "stripe", "-listen", "example.com:80"},
		{"-vendor", "hooks", "-latency", "slow"},
	} {
		if err := runFake(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

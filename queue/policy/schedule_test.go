package policy

import (
	"strings"
	"testing"
	"time"
)

const schedBase = "queue: {bound: 10, types: [report]}\ndownstreams:\n  api: {rate: 5, base_url: \"https://api.example.com/\"}\ntenants:\n  small: {algorithm: gcra, limit: 2, period: 1s}\n"

func TestSchedules(t *testing.T) {
	cfg := mustParse(t, []byte(schedBase+strings.Join([]string{
		"schedules:",
		"  nightly:",
		"    cron: \"0 3 * * *\"",
		"    tenant: acme",
		"    catch_up: 1h",
		"    job:",
		"      type: sluice.http",
		"      downstream: api",
		"      payload: {method: POST, url: \"https://api.example.com/reports\", header: {X-N: \"1\"}}",
		"      max_retry: -1",
		"      timeout: 30s",
		"  pulse:",
		"    every: 10m",
		"    tenant: beta",
		"    job: {type: report, cost: 2, payload: [1, two, {three: 3.5}]}",
		"  paris:",
		"    cron: \"CRON_TZ=Europe/Paris 30 8 * * 1-5\"",
		"    tenant: beta",
		"    job: {type: report}",
	}, "\n")+"\n"))
	if len(cfg.Schedules) != 3 {
		t.Fatalf("%d schedules, want 3", len(cfg.Schedules))
	}
	n, p, paris := cfg.Schedules[0], cfg.Schedules[1], cfg.Schedules[2]
	if n.Name != "nightly" || n.Cron != "0 3 * * *" || n.Every != 0 || n.CatchUp != time.Hour || n.Job.Tenant != "acme" ||
		n.Job.Type != "sluice.http" || n.Job.MaxRetry != -1 || n.Job.Timeout != 30*time.Second {
		t.Errorf("nightly = %+v", n)
	}
	if got := string(n.Job.Payload); got != `{"header":{"X-N":"1"},"method":"POST","url":"https://api.example.com/reports"}` {
		t.Errorf("nightly's payload = %s", got)
	}
	if p.Every != 10*time.Minute || p.CatchUp != DefaultCatchUp || p.Job.Cost != 2 || string(p.Job.Payload) != `[1,"two",{"three":3.5}]` {
		t.Errorf("pulse = %+v, payload %s", p, p.Job.Payload)
	}
	at := time.Date(2026, 11, 27, 9, 14, 50, 0, time.UTC)
	steps := []struct {
		s    *Schedule
		from time.Time
		want time.Time
	}{
		{&n, at, time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)},
		{&n, time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)},
		{&p, at, time.Date(2026, 11, 27, 9, 20, 0, 0, time.UTC)},
		{&p, time.Date(2026, 11, 27, 9, 20, 0, 0, time.UTC), time.Date(2026, 11, 27, 9, 30, 0, 0, time.UTC)},
		{&paris, at, time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC)}, // Friday 09:14 UTC is past 08:30 in Paris: Monday, UTC+1
	}
	for _, st := range steps {
		if got := st.s.Next(st.from); !got.Equal(st.want) || got.Location() != time.UTC {
			t.Errorf("%s.Next(%v) = %v, want %v", st.s.Name, st.from, got, st.want)
		}
	}
	// A Schedule not made by Parse parses its expression itself.
	bare := Schedule{Cron: "*/15 * * * *"}
	if got := bare.Next(at); !got.Equal(time.Date(2026, 11, 27, 9, 15, 0, 0, time.UTC)) {
		t.Errorf("bare Next = %v", got)
	}
}

func TestScheduleErrors(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  string
	}{
		{"typo", []string{"  s: {cron: \"* * * * *\", tenant: a, job: {type: report}, tenat: b}"},
			`line 7:58: schedules.s.tenat: unknown field; did you mean "tenant"?`},
		{"job typo", []string{"  s: {cron: \"* * * * *\", tenant: a, job: {type: report, paylod: 1}}"},
			`line 7:57: schedules.s.job.paylod: unknown field; did you mean "payload"?`},
		{"neither", []string{"  s: {tenant: a, job: {type: report}}"},
			"line 7:3: schedules.s.cron: required: a cron expression"},
		{"both", []string{"  s: {cron: \"* * * * *\", every: 1m, tenant: a, job: {type: report}}"},
			"line 7:33: schedules.s.every: give cron or every, not both"},
		{"bad cron", []string{"  s: {cron: \"61 * * * *\", tenant: a, job: {type: report}}"},
			"line 7:13: schedules.s.cron: not a cron expression of 5 fields"},
		{"six fields", []string{"  s: {cron: \"0 0 3 * * *\", tenant: a, job: {type: report}}"},
			"line 7:13: schedules.s.cron: not a cron expression of 5 fields"},
		{"descriptor", []string{"  s: {cron: \"@every 1h\", tenant: a, job: {type: report}}"},
			"line 7:13: schedules.s.cron: descriptors such as @daily are not taken"},
		{"zone without schedule", []string{"  s: {cron: \"TZ=UTC\", tenant: a, job: {type: report}}"},
			"line 7:13: schedules.s.cron: not a cron expression"},
		{"bad zone", []string{"  s: {cron: \"CRON_TZ=Nowhere/Else 0 3 * * *\", tenant: a, job: {type: report}}"},
			"line 7:13: schedules.s.cron: not a cron expression"},
		{"never", []string{"  s: {cron: \"0 0 30 2 *\", tenant: a, job: {type: report}}"},
			"line 7:13: schedules.s.cron: \"0 0 30 2 *\" never matches a date"},
		{"every too short", []string{"  s: {every: 500ms, tenant: a, job: {type: report}}"},
			"line 7:14: schedules.s.every: must be between 1s and"},
		{"every fraction", []string{"  s: {every: 1500ms, tenant: a, job: {type: report}}"},
			"line 7:14: schedules.s.every: must be a whole number of seconds, got 1.5s"},
		{"every no unit", []string{"  s: {every: 10, tenant: a, job: {type: report}}"},
			"line 7:14: schedules.s.every: a duration needs a unit"},
		{"catch_up", []string{"  s: {every: 1m, catch_up: 0s, tenant: a, job: {type: report}}"},
			"line 7:28: schedules.s.catch_up: must be between 1s and 24h0m0s, got 0s"},
		{"no tenant", []string{"  s: {every: 1m, job: {type: report}}"},
			"line 7:3: schedules.s.tenant: required"},
		{"no job", []string{"  s: {every: 1m, tenant: a}"},
			"line 7:3: schedules.s.job: required"},
		{"no type", []string{"  s: {every: 1m, tenant: a, job: {cost: 1}}"},
			"line 7:29: schedules.s.job.type: required"},
		{"unknown type", []string{"  s: {every: 1m, tenant: a, job: {type: reprot}}"},
			"line 7:41: schedules.s.job.type: unknown job type"},
		{"unknown downstream", []string{"  s: {every: 1m, tenant: a, job: {type: report, downstream: apo}}"},
			"line 7:61: schedules.s.job.downstream: unknown downstream"},
		{"http without url", []string{"  s: {every: 1m, tenant: a, job: {type: sluice.http, downstream: api, payload: {method: GET}}}"},
			"line 7:80: schedules.s.job.payload: sluice.http job: url is required"},
		{"http without downstream", []string{"  s: {every: 1m, tenant: a, job: {type: sluice.http, payload: {url: \"https://api.example.com/\"}}}"},
			"line 7:29: schedules.s.job.downstream: a sluice.http job must name its downstream"},
		{"http foreign url", []string{"  s: {every: 1m, tenant: a, job: {type: sluice.http, downstream: api, payload: {url: \"https://evil.example/\"}}}"},
			"line 7:80: schedules.s.job.payload:"},
		{"cost over burst", []string{"  s: {every: 1m, tenant: a, job: {type: report, downstream: api, cost: 9}}"},
			"line 7:72: schedules.s.job.cost: cost 9 exceeds downstream \"api\"'s burst of 1"},
		{"cost over tenant", []string{"  s: {every: 1m, tenant: small, job: {type: report, cost: 3}}"},
			"line 7:59: schedules.s.job.cost: cost 3 exceeds the capacity 2 of tenant \"small\""},
		{"max_retry", []string{"  s: {every: 1m, tenant: a, job: {type: report, max_retry: -2}}"},
			"line 7:60: schedules.s.job.max_retry: must be at least -1, got -2"},
		{"payload key twice", []string{"  s: {every: 1m, tenant: a, job: {type: report, payload: {a: 1, a: 2}}}"},
			"line 7:65: schedules.s.job.payload.a: defined twice"},
		{"payload inf", []string{"  s: {every: 1m, tenant: a, job: {type: report, payload: {a: .inf}}}"},
			"line 7:62: schedules.s.job.payload.a: JSON has no .inf"},
		{"bad name", []string{"  \"a b\": {every: 1m, tenant: a, job: {type: report}}"},
			"line 7:3: schedules[\"a b\"]: a schedule's name must be 1 to 64 characters"},
		{"bad tenant", []string{"  s: {every: 1m, tenant: \"\", job: {type: report}}"},
			"line 7:26: schedules.s.tenant: must not be empty"},
		{"not a mapping", []string{"  s: 3"},
			"line 7:6: schedules.s: must be a mapping of keys to values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(schedBase + "schedules:\n" + strings.Join(tc.lines, "\n") + "\n")
			_, err := Parse(data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v\nwant %q", err, tc.want)
			}
		})
	}
}

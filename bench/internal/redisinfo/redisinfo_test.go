package redisinfo

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestParseSubAdd(t *testing.T) {
	after := Parse("# Server\r\nredis_version:7.2.4\r\n\r\n# Stats\r\ntotal_commands_processed:40\r\n\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=80,usec_per_call=8.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hmget:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=2,usec=50,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n")
	if after.Version != "7.2.4" || after.Processed != 40 || after.CPU != 3.75 || after.Commands["hmget"] != (CommandStat{10, 20}) {
		t.Fatalf("Parse: %+v", after)
	}
	before := Parse("total_commands_processed:21\r\nused_cpu_user:1\r\n" +
		"cmdstat_evalsha:calls=5,usec=30\r\ncmdstat_info:calls=1,usec=25\r\ncmdstat_time:calls=10,usec=5\r\n")
	d := after.Sub(before)
	// The INFO that read before is left out.
	if d.Processed != 18 || d.CPU != 2.75 || d.Version != "7.2.4" {
		t.Errorf("Sub: processed %d, CPU %v, version %q; want 18, 2.75, 7.2.4", d.Processed, d.CPU, d.Version)
	}
	want := map[string]CommandStat{"evalsha": {5, 50}, "hmget": {10, 20}}
	if len(d.Commands) != len(want) {
		t.Errorf("Sub: commands %v; want %v", d.Commands, want)
	}
	for name, c := range want {
		if d.Commands[name] != c {
			t.Errorf("Sub: %s %+v; want %+v", name, d.Commands[name], c)
		}
	}
	if n := d.Calls("evalsha", "hmget", "eval"); n != 15 {
		t.Errorf("Calls = %d; want 15", n)
	}
	sum := Snapshot{}.Add(d).Add(d)
	if sum.Processed != 36 || sum.CPU != 5.5 || sum.Commands["evalsha"] != (CommandStat{10, 100}) || d.Commands["evalsha"] != (CommandStat{5, 50}) {
		t.Errorf("Add: %+v (d: %+v)", sum, d)
	}
}

func TestReadTwiceCountsNothing(t *testing.T) {
	c := redistest.Start(t, redistest.Config{}).Client(t)
	ctx := context.Background()
	a, err := Read(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := Read(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	d := b.Sub(a)
	if d.Processed != 1 || d.Calls("set") != 1 || len(d.Commands) != 1 || !d.At.After(a.At) {
		t.Errorf("one SET between two reads: %+v", d)
	}
}

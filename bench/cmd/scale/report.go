package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// caseResult is one case's systems, in the order they ran.
type caseResult struct {
	c       scaleCase
	systems []*sysResult
}

func (r caseResult) get(system string) *sysResult {
	for _, s := range r.systems {
		if s.system == system {
			return s
		}
	}
	return nil
}

// run runs the chosen cases, prints the report and writes it to -out.
func run(ctx context.Context, o options) error {
	e, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer e.close()
	var results []caseResult
	for _, c := range o.cases {
		t := e.standalone
		if c.cluster {
			t = e.cluster
		}
		r := caseResult{c: c}
		for _, system := range c.systems {
			s, err := e.runSystem(ctx, c, system, t)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", c.name, system, err)
			}
			r.systems = append(r.systems, s)
		}
		results = append(results, r)
	}
	var b strings.Builder
	writeReport(&b, o, e.redisVersion, results)
	fmt.Print(b.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Printf("\nWritten to %s\n", o.out)
	}
	if o.keep {
		fmt.Printf("Files kept in %s\n", e.dir)
	}
	return nil
}

// writeReport writes the markdown report.
func writeReport(w io.Writer, o options, version string, results []caseResult) {
	fmt.Fprintf(w, "# sluice scale benchmark\n\n%s, %s, redis-server %s. Each system: %d worker processes × %d goroutines (global5k: × %d), jobs enqueued before the workers start, %v of warm-up, then %v measured. The API answers in %v-%v. sluice's per-tenant burst: %d.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), machine(), version, o.workers, o.conc, 2*o.conc,
		o.warmup, o.measure, o.latencyMin, o.latencyMax, o.sluiceBurst)
	if o.redisCPU > 0 {
		fmt.Fprintf(w, "Each redis-server (the standalone one, and each master of the cluster) is capped at %v CPUs, in a cgroup of its own, as a master on a host of its own would be (-redis-cpu).\n\n", o.redisCPU)
	}
	fmt.Fprintln(w, "| case | system | jobs | delivered/s | from the start | 429s measured | 429s in the run (tenants) | a tenant's first 429: after calls, s | overflow p50 / max | commands / job | scripts / job | Redis CPU µs / job | peak RSS of the workers | commands per master |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	var notes []string
	for _, r := range results {
		for _, s := range r.systems {
			fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.0f | %d | %d (%d) | %s | %s | %s | %s | %s | %s | %s |\n",
				r.c.name, s.system, s.jobs, s.perSecond(), s.fromStart(), s.refused, s.api.Refused, s.api.RefusedTenants,
				first(s.api), overflow(s.api), per(float64(s.redis.Processed), s.delivered, 1), per(float64(s.redis.Calls(scriptCalls...)), s.delivered, 2),
				per(s.redis.CPU*1e6, s.delivered, 1), mib(s.rss), masters(s.perMaster))
			for _, n := range s.notes {
				notes = append(notes, fmt.Sprintf("- %s, %s: %s", r.c.name, s.system, n))
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | what | sluice / recipe | from the start | sluice / bare | from the start |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	for _, r := range results {
		sl, rc, bare := r.get(sysSluice), r.get(sysRecipe), r.get(sysBare)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.c.name, r.c.what,
			ratio(sl, rc, (*sysResult).perSecond), ratio(sl, rc, (*sysResult).fromStart),
			ratio(sl, bare, (*sysResult).perSecond), ratio(sl, bare, (*sysResult).fromStart))
	}
	var std, cl *caseResult
	for i := range results {
		switch results[i].c.name {
		case "tenants10k":
			std = &results[i]
		case "cluster10k":
			cl = &results[i]
		}
	}
	if std != nil && cl != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| 10,000 tenants | cluster / standalone, delivered/s |")
		fmt.Fprintln(w, "| --- | --- |")
		for _, s := range cl.systems {
			fmt.Fprintf(w, "| %s | %s |\n", s.system, ratio(s, std.get(s.system), (*sysResult).perSecond))
		}
	}
	fmt.Fprintf(w, `
- **delivered/s**: the API's 200s in the measured window, a second. **from the start**: the API's 200s from the workers' start to the window's end, a second; where the API's quota sets the pace in the window (a tenant's burst, then 2 a second), the window's figure counts how much of the bursts falls inside it, and a system that sends them sooner shows less there. **429s measured**: its 429s in that window.
- **429s in the run**: from the workers' start to the window's end, and the tenants refused at least once. **A tenant's first 429**: over those tenants, the median of the calls accepted before it and of the time since the tenant's first call: about a bucket (40) and a second or two is the switch from the burst to the paced rate.
- **overflow**: by how much each refused call would have overflowed its bucket: a few ms is a call that came a little early, about one interval (500 ms at 2/s) a call too many.
- **commands, scripts, Redis CPU per job**: INFO deltas over the window (total_commands_processed, which counts the commands scripts run; EVAL/EVALSHA/FCALL calls; used_cpu_user+sys), every master summed, over the calls delivered in the window.
- **peak RSS**: the workers' VmRSS summed over the processes, sampled every %v from their start to the window's end.
- **commands per master**: each master's share of the commands in the window (cluster only).
`, rssEvery)
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNotes:\n\n%s\n", strings.Join(notes, "\n"))
	}
}

// per formats total/n with prec decimals, or "-" when nothing was
// delivered.
func per(total float64, n int64, prec int) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, total/float64(n))
}

func first(s apiStats) string {
	if s.RefusedTenants == 0 {
		return "-"
	}
	return fmt.Sprintf("%d, %.1f s", s.FirstCalls, float64(s.FirstAfter)/1e6)
}

func overflow(s apiStats) string {
	if s.Refused == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", ms(s.Overflow[0]), ms(s.Overflow[2]))
}

func ms(us int64) string { return fmt.Sprintf("%.1f ms", float64(us)/1000) }

func mib(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// masters formats each master's share of the commands, when there are
// several.
func masters(counts []int64) string {
	if len(counts) < 2 {
		return "-"
	}
	var total int64
	for _, c := range counts {
		total += c
	}
	if total <= 0 {
		return "-"
	}
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%.0f%% (%d)", 100*float64(c)/float64(total), c)
	}
	return strings.Join(parts, " / ")
}

// ratio is a's figure over b's (delivered/s in the window, or from the
// start), or "-" when either is missing.
func ratio(a, b *sysResult, fig func(*sysResult) float64) string {
	if a == nil || b == nil || fig(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", fig(a)/fig(b))
}

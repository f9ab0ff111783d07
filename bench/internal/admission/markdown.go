package admission

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
)

// Markdown writes the report as markdown tables, with a note on the
// machine and the settings.
func (r *Report) Markdown(w io.Writer, machine string) {
	cfg := r.Config
	fmt.Fprintf(w, "## Admission benchmarks\n\n")
	fmt.Fprintf(w, "redis-server %s on 127.0.0.1, %s/%s, %d CPUs (GOMAXPROCS %d), %s.",
		r.Server, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	if machine != "" {
		fmt.Fprintf(w, " %s", machine)
	}
	if r.LoadBefore != "" {
		fmt.Fprintf(w, " Load average (1 min) %s at the start, %s at the end.", r.LoadBefore, r.LoadAfter)
	}
	fmt.Fprintf(w, "\n\nPolicy %d per %v (burst %d for token bucket, GCRA and redis_rate), cost 1, "+
		"each call on one of %d keys chosen at random. Each cell is %v of calls in %d rounds of %v, "+
		"the targets taking turns on one redis-server and one go-redis client (pool of %d connections); "+
		"whole run %v. Latency is one call's round trip as the caller sees it. "+
		"Server µs/script: time inside EVALSHA (INFO commandstats); "+
		"server and client CPU: CPU time of redis-server and of this process, per decision.\n\n",
		DefaultLimit, DefaultPeriod, DefaultLimit, cfg.Keys, cfg.Duration, cfg.Rounds,
		cfg.Duration/time.Duration(cfg.Rounds), maxOf(cfg.Concurrency)+4, r.Elapsed.Round(time.Second))

	fmt.Fprintf(w, "### Throughput and latency\n\n")
	fmt.Fprintf(w, "| algorithm | callers | decisions/s | p50 | p99 | vs redis_rate | goal | admitted | server µs/script | server CPU µs | client CPU µs | Redis commands per decision |\n")
	fmt.Fprintf(w, "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- |\n")
	for _, row := range r.Rows {
		res := row.Result
		ratio, goal := "1.00 (baseline)", "—"
		if row.Target != RedisRate {
			m, lo, hi := r.Ratio(row.Target, row.Concurrency)
			ratio = fmt.Sprintf("%.2f (%.2f–%.2f)", m, lo, hi)
			goal = fmt.Sprintf("≥ %.1f", Goal(row.Target))
		}
		srv, cli := 0.0, 0.0
		if res.Calls > 0 {
			srv = row.Server.CPU / float64(res.Calls) * 1e6
			cli = row.ClientCPU.Seconds() / float64(res.Calls) * 1e6
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %s | %.1f%% | %.2f | %.1f | %.1f | %s |\n",
			row.Target, row.Concurrency, res.PerSecond(),
			micros(res.Quantile(0.5)), micros(res.Quantile(0.99)),
			ratio, goal, 100*res.AdmittedShare(),
			scriptUsec(row.Server), srv, cli, innerCommands(row.Server))
	}

	fmt.Fprintf(w, "\n### Throughput relative to redis_rate\n\n")
	fmt.Fprintf(w, "Median over the %d rounds of the algorithm's rate divided by redis_rate's in the same round, "+
		"with the quartiles in brackets (as in the \"vs redis_rate\" column above). "+
		"Met: yes when the lower quartile reaches the goal at every concurrency, no when an upper quartile "+
		"is below it, otherwise within noise. Script cost: the algorithm's server µs per script over redis_rate's, "+
		"all concurrencies together; when Redis, not the client, is the bottleneck, throughput goes as its inverse.\n\n", cfg.Rounds)
	fmt.Fprintf(w, "| algorithm |")
	for _, c := range cfg.Concurrency {
		fmt.Fprintf(w, " c%d |", c)
	}
	fmt.Fprintf(w, " goal | met | script cost |\n| --- |%s --: | --- | --: |\n", strings.Repeat(" --: |", len(cfg.Concurrency)))
	for _, name := range r.Targets {
		if name == RedisRate {
			continue
		}
		met := "yes"
		fmt.Fprintf(w, "| %s |", name)
		for _, c := range cfg.Concurrency {
			q, lo, hi := r.Ratio(name, c)
			fmt.Fprintf(w, " %.2f (%.2f–%.2f) |", q, lo, hi)
			switch goal := Goal(name); {
			case hi < goal:
				met = "no"
			case lo < goal && met == "yes":
				met = "within noise"
			}
		}
		fmt.Fprintf(w, " ≥ %.1f | %s | %.2f× |\n", Goal(name), met, r.scriptUsec(name)/r.scriptUsec(RedisRate))
	}

	fmt.Fprintf(w, "\n### Redis memory per key\n\n")
	fmt.Fprintf(w, "After one admitted call per key; MEMORY USAGE with SAMPLES 0, averaged over %d keys. "+
		"Includes the key name and Redis's per-key overhead.\n\n", cfg.MemoryKeys)
	fmt.Fprintf(w, "| algorithm | bytes per key | key name bytes | encoding |\n| --- | --: | --: | --- |\n")
	for _, name := range r.Targets {
		m := r.Memory[name]
		fmt.Fprintf(w, "| %s | %.1f | %d | %s |\n", name, m.Bytes, m.NameBytes, m.Encoding)
	}

	fmt.Fprintf(w, "\n### Sliding window log per entry\n\n")
	fmt.Fprintf(w, "One log key holding N entries (one call of cost N). Bytes per entry: "+
		"(usage with N entries − usage with 1) / (N − 1).\n\n")
	fmt.Fprintf(w, "| entries | bytes | bytes per entry | encoding |\n| --: | --: | --: | --- |\n")
	var one int64
	for i, l := range r.Log {
		if i == 0 {
			one = l.Bytes
		}
		per := "—"
		if i > 0 && l.Entries > r.Log[0].Entries {
			per = fmt.Sprintf("%.1f", float64(l.Bytes-one)/float64(l.Entries-r.Log[0].Entries))
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s |\n", l.Entries, l.Bytes, per, l.Encoding)
	}
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// scriptUsec is target's server time per script over all its rows.
func (r *Report) scriptUsec(target string) float64 {
	var s redisinfo.Snapshot
	for _, row := range r.Rows {
		if row.Target == target {
			s = s.Add(row.Server)
		}
	}
	return scriptUsec(s)
}

package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	benchstat "github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/downstream/downstreamtest"
)

// printQuota prints one quota's table, its targets for sluice, and
// the diagnostics.
func printQuota(o options, q int64, rows []*row) {
	tol := max(2, int(math.Ceil(float64(q)/100)))
	fmt.Fprintf(out, "\n## Quota %d/s (strict downstream: GCRA, tolerance %d calls = %v)\n\n", q, tol, time.Duration(tol)*time.Second/time.Duration(q))
	fmt.Fprintf(out, "| approach | procs × goroutines | achieved (2xx) | sent | max in 1 s | max in 100 ms | gap CV | 429s | calls | Redis cmds/call | server cmds/call |\n")
	fmt.Fprintf(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		if !r.steady {
			fmt.Fprintf(out, "| %s | %d × %d | – | – | – | – | – | – | %d | – | – |\n", r.a.label, r.a.procs, r.a.goroutines, r.allCalls)
			continue
		}
		fmt.Fprintf(out, "| %s | %d × %d | %.1f%% | %.1f%% | %d | %d | %.3f | %d | %d | %.3f | %.3f |\n",
			r.a.label, r.a.procs, r.a.goroutines, 100*r.achieved, 100*r.sent, r.max1s, r.max100, r.cv,
			r.limited, r.calls, r.clientCmds, r.serverCmds)
	}
	fmt.Fprintf(out, "\nThe quota allows %d calls in any 1 s and %d in any 100 ms. All figures over the steady windows: each run's "+
		"arrivals less their first and last %v. *achieved*: calls the downstream accepted per second, as a share of the quota; "+
		"*sent*: all calls it received. *max in*: the most arrivals in a sliding window, over all positions. *gap CV*: standard "+
		"deviation over mean of the gaps between arrivals. *Redis cmds/call*: commands the workers' go-redis clients sent "+
		"(counted by a hook) per downstream call, one per round trip; *server cmds/call*: the delta of INFO "+
		"total_commands_processed per call, less the benchmark's own INFO; it also counts the commands that a script runs "+
		"(sluice's reservation script runs TIME, HMGET, HSET and PEXPIRE inside its one EVALSHA).\n", q, q/10, o.trim)

	printTargets(rows)

	fmt.Fprintf(out, "\n<details><summary>diagnostics at %d/s</summary>\n\n", q)
	fmt.Fprintf(out, "| approach | whole runs: 429s / calls | steady s | scripts/call | CPU µs/call: workers / redis-server / downstream | sluice: time in Wait beyond its delay, p50 / p99 / max | HTTP round trip p50 / p99 / max | load avg after each run |\n")
	fmt.Fprintf(out, "| --- | ---: | ---: | ---: | --- | --- | --- | --- |\n")
	for _, r := range rows {
		var over, lat []time.Duration
		var loads []string
		var wcpu, rcpu, pcpu time.Duration
		var wcalls, rcalls int
		for _, s := range r.segs {
			for _, w := range s.workers {
				over = append(over, w.WaitOver...)
				lat = append(lat, w.CallLatency...)
				wcpu += w.CPU
			}
			wcalls += s.sentCalls
			rcpu += s.server.cpu
			rcalls += s.srvCalls
			pcpu += s.parentCPU
			loads = append(loads, fmt.Sprintf("%.1f", s.load))
		}
		perCall := func(d time.Duration, n int) string {
			if n == 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f", float64(d/time.Microsecond)/float64(n))
		}
		fmt.Fprintf(out, "| %s | %d / %d | %.1f | %.3f | %s / %s / %s | %s | %s | %s |\n", r.a.label, r.allLimited, r.allCalls, r.secs, r.scripts,
			perCall(wcpu, wcalls), perCall(rcpu, rcalls), perCall(pcpu, wcalls), quantiles(over), quantiles(lat), strings.Join(loads, ", "))
	}
	fmt.Fprintf(out, "\nStalls in the steady window: the latest wake-up from a 10 ms sleep in the downstream's process and in the "+
		"slowest worker, and the longest PING to redis-server every 10 ms (count over 10 ms, time lost beyond 10 ms):\n")
	for _, r := range rows {
		for _, s := range r.segs {
			var worst stalls
			for _, w := range s.workers {
				worst.Max = max(worst.Max, w.Stalls.Max)
				worst.Over += w.Stalls.Over
				worst.Total += w.Stalls.Total
			}
			round := ""
			if len(r.segs) > 1 {
				round = fmt.Sprintf(", round %d", s.round+1)
			}
			in := s.arrivals[s.window.Lo:s.window.Hi]
			fmt.Fprintf(out, "\n- %s%s: %d 429s, gap CV %.3f, max in 100 ms %d; stalls: downstream %s; workers %s; Redis PING %s",
				r.a.label, round, benchstat.CountTrue(s.refused, s.window.Lo, s.window.Hi), benchstat.GapCV(in),
				downstreamtest.MaxInWindow(in, 100*time.Millisecond), s.parent, worst, s.redis)
		}
	}
	fmt.Fprintf(out, "\n")
	for _, r := range rows {
		for _, s := range r.segs {
			for _, n := range s.notes {
				fmt.Fprintf(out, "\n- %s, round %d: %s", r.a.label, s.round+1, n)
			}
		}
	}
	fmt.Fprintf(out, "\n\n</details>\n")
}

// printTargets checks sluice's row against its targets.
func printTargets(rows []*row) {
	var sl, floor *row
	var peers []*row
	for _, r := range rows {
		switch r.a.kind {
		case kindSluice:
			sl = r
		case kindFloor:
			floor = r
		default:
			peers = append(peers, r)
		}
	}
	if sl == nil || !sl.steady {
		return
	}
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	fmt.Fprintf(out, "\nIssue 3's targets for sluice:\n\n")
	fmt.Fprintf(out, "- ≥ 98%% of the quota achieved: %.1f%%, %s\n", 100*sl.achieved, mark(sl.achieved >= 0.98))
	if floor != nil && floor.steady {
		fmt.Fprintf(out, "- no more 429s than the floor: %d vs %d, %s\n", sl.limited, floor.limited, mark(sl.limited <= floor.limited))
	}
	if len(peers) > 0 {
		fewer, tied := true, false
		var list []string
		for _, p := range peers {
			fewer = fewer && sl.limited < p.limited
			tied = tied || sl.limited == 0 && p.limited == 0
			list = append(list, fmt.Sprintf("%s %d", p.a.label, p.limited))
		}
		verdict := mark(fewer)
		if !fewer && tied && sl.limited == 0 {
			verdict = "**missed** only by a tie at 0, which cannot be beaten"
		}
		fmt.Fprintf(out, "- fewer 429s than every peer: %d vs %s, %s\n", sl.limited, strings.Join(list, ", "), verdict)
	}
	fmt.Fprintf(out, "- ≤ 1.05 Redis commands per call: %.3f, %s\n", sl.clientCmds, mark(sl.clientCmds <= 1.05))
	if floor != nil && floor.steady {
		fmt.Fprintf(out, "- gap CV within 0.05 of the floor's: %.3f vs %.3f, %s\n", sl.cv, floor.cv, mark(math.Abs(sl.cv-floor.cv) <= 0.05))
	}
}

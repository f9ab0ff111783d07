package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
)

// The parts of a run that some figures leave out.
const (
	// steadyAfter: the share of the quota is counted from this long after
	// the first call (start-up is not the steady state).
	steadyAfter = 2 * time.Second
	// lateAfter: 429s from this long after the first call are counted
	// apart, as the "no 429 after the first seconds".
	lateAfter = 5 * time.Second
)

// scriptCommands are the commands that run a script, as INFO commandstats
// names them.
var scriptCommands = []string{"evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro"}

// figures are one system's results in one case, from the API's record of
// arrivals. Every figure covers the calls that arrived from the first one
// (start) to the end of the run (end): calls that arrive while the system
// stops are left out.
type figures struct {
	system string
	quota  float64 // calls a second

	start, end time.Time
	firstCall  time.Duration // from the moment the system was up to its first call; negative if it called earlier
	accepted   int           // calls answered 200
	refused    int           // calls answered 429
	late       int           // of refused, those at or after start+lateAfter
	steadyRate float64       // 200s a second in [start+steadyAfter, end); NaN when that is empty
	silence    time.Duration // the longest spell in [start, end] without a 200
	silenceAt  time.Duration // when that spell began, from start

	// The Redis server's work while the system ran (sluice only): from
	// CONFIG RESETSTAT, before the workers started, to the end.
	redis *redisinfo.Snapshot

	notes []string // what went wrong beside the figures: a worker that exited early, say
}

// measure computes the figures of the arrivals (in the order the API
// decided them) of a system that was up at begin and ran until end, against
// a quota of quota calls a second. The first call starts the measured span;
// with none, it starts at begin.
func measure(system string, arr []arrival, begin, end time.Time, quota float64) figures {
	f := figures{system: system, quota: quota, start: begin, end: end}
	if len(arr) > 0 && arr[0].At.Before(end) {
		f.start = arr[0].At
		f.firstCall = arr[0].At.Sub(begin)
	}
	steady := f.start.Add(steadyAfter)
	late := f.start.Add(lateAfter)
	prev := f.start
	inSteady := 0
	for _, a := range arr {
		if a.At.After(end) {
			break
		}
		if !a.OK {
			f.refused++
			if !a.At.Before(late) {
				f.late++
			}
			continue
		}
		f.accepted++
		if !a.At.Before(steady) {
			inSteady++
		}
		if gap := a.At.Sub(prev); gap > f.silence {
			f.silence, f.silenceAt = gap, prev.Sub(f.start)
		}
		prev = a.At
	}
	if gap := end.Sub(prev); gap > f.silence {
		f.silence, f.silenceAt = gap, prev.Sub(f.start)
	}
	f.steadyRate = math.NaN()
	if span := end.Sub(steady); span > 0 {
		f.steadyRate = float64(inSteady) / span.Seconds()
	}
	return f
}

// share is the steady rate of 200s as a share of the quota.
func (f figures) share() float64 { return f.steadyRate / f.quota }

// perJob returns the script calls and all commands Redis ran per call
// answered 200; NaN without Redis figures or without a 200.
func (f figures) perJob() (scripts, commands float64) {
	if f.redis == nil || f.accepted == 0 {
		return math.NaN(), math.NaN()
	}
	n := float64(f.accepted)
	return float64(f.redis.Calls(scriptCommands...)) / n, float64(f.redis.Processed) / n
}

// caseResult is one case's run: sluice and the floor (either may be
// missing when -systems leaves it out).
type caseResult struct {
	c             fleetCase
	sluice, floor *figures
}

// target is one of the targets, judged on a run.
type target struct {
	name     string // the case
	want     string
	measured string
	met      bool
	judged   bool // false when the run lacks what the target needs
}

// judge returns the targets that the results can be judged on, in the
// order of the cases; commands is the gcra200 run's target on Redis work.
func judge(results []caseResult, commands bool) []target {
	var ts []target
	for _, r := range results {
		s, fl := r.sluice, r.floor
		switch r.c.name {
		case "window50":
			t := target{name: r.c.name, want: "≥ 95% of the quota served, ≤ 5 429s"}
			if s != nil {
				t.judged = true
				t.met = s.share() >= 0.95 && s.refused <= 5
				t.measured = fmt.Sprintf("%s served, %d 429s", pct(s.share()), s.refused)
			}
			ts = append(ts, t)
		case "gcra200", "gcra1000":
			t := target{name: r.c.name, want: "429s no more than the floor's"}
			if s != nil && fl != nil {
				t.judged = true
				t.met = s.refused <= fl.refused
				t.measured = fmt.Sprintf("%d 429s, floor %d", s.refused, fl.refused)
			}
			ts = append(ts, t)
		case "conc4":
			t := target{name: r.c.name, want: fmt.Sprintf("≥ 95%% of %d/s", r.c.api.rate)}
			if s != nil {
				t.judged = true
				t.met = s.share() >= 0.95
				t.measured = fmt.Sprintf("%s (%.1f/s)", pct(s.share()), s.steadyRate)
			}
			ts = append(ts, t)
		}
		if commands && r.c.name == "gcra200" {
			t := target{name: "commands", want: "≤ 3 script calls and ≤ 20 commands per delivered job"}
			if s != nil && s.redis != nil {
				sc, cmd := s.perJob()
				t.judged = true
				t.met = sc <= 3 && cmd <= 20
				t.measured = fmt.Sprintf("%.2f script calls, %.1f commands", sc, cmd)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// writeReport prints the figures and the targets as markdown tables.
func writeReport(w io.Writer, results []caseResult, ts []target) {
	fmt.Fprintln(w, "| case | API | system | 200s | first call | served, steady | share of quota | 429s | 429s after 5 s | longest silence | script calls / job | commands / job |")
	fmt.Fprintln(w, "| --- | --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, r := range results {
		for _, f := range []*figures{r.sluice, r.floor} {
			if f == nil {
				continue
			}
			sc, cmd := f.perJob()
			fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %.1f/s | %s | %d | %d | %s at %s | %s | %s |\n",
				r.c.name, r.c.api, f.system, f.accepted, seconds(f.firstCall), f.steadyRate, pct(f.share()),
				f.refused, f.late, seconds(f.silence), seconds(f.silenceAt), num(sc, 2), num(cmd, 1))
		}
	}
	var notes []string
	for _, r := range results {
		for _, f := range []*figures{r.sluice, r.floor} {
			if f == nil {
				continue
			}
			for _, n := range f.notes {
				notes = append(notes, fmt.Sprintf("- %s, %s: %s", r.c.name, f.system, n))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNotes:\n\n%s\n", strings.Join(notes, "\n"))
	}
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| target | wanted | measured (sluice) | met |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, t := range ts {
		met := "no"
		switch {
		case !t.judged:
			met, t.measured = "not judged", "(the run lacks a system this needs)"
		case t.met:
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, t.want, t.measured, met)
	}
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

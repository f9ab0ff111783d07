package admission

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/bench/internal/sysstat"
)

// Config configures RunSuite. Zero fields take the defaults in brackets.
type Config struct {
	// Duration is the measured time of each cell (one target at one
	// concurrency), split evenly over the rounds [5s].
	Duration time.Duration
	// Concurrency lists the numbers of concurrent callers [1, 8, 64].
	Concurrency []int
	// Rounds is the number of slices each cell's Duration is cut into.
	// Each round runs every cell once, each concurrency with the targets
	// taking turns, starting with a different target each round, so that a
	// slow moment of a shared machine is spread over every target instead
	// of landing on one [10]. Each row pools the runs of all rounds.
	Rounds int
	// Keys is the number of distinct keys [DefaultKeys].
	Keys int
	// Warmup runs each target this long before measuring, to load its
	// script, open the connections and create the keys [300ms].
	Warmup time.Duration
	// MemoryKeys is the number of keys MEMORY USAGE is averaged over
	// [1000].
	MemoryKeys int
	// LogSizes are the sliding-log sizes measured [1, 100, 1000].
	LogSizes []int
	// Progress, when set, receives one line per measurement.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = []int{1, 8, 64}
	}
	if c.Rounds <= 0 {
		c.Rounds = 10
	}
	if c.Keys <= 0 {
		c.Keys = DefaultKeys
	}
	if c.Warmup <= 0 {
		c.Warmup = 300 * time.Millisecond
	}
	if c.MemoryKeys <= 0 {
		c.MemoryKeys = 1000
	}
	if len(c.LogSizes) == 0 {
		c.LogSizes = []int{1, 100, 1000}
	}
}

// Row is one target at one concurrency, all rounds together.
type Row struct {
	Target      string
	Concurrency int
	Result      Result
	// Rounds are the runs of each round, in order; Result pools them.
	Rounds []Result
	// Server is what the server spent on the row's runs: the sum of the
	// differences of snapshots taken around each run.
	Server redisinfo.Snapshot
	// ClientCPU is the CPU time this process (the Go client and the
	// benchmark's own loop) spent on the row's runs.
	ClientCPU time.Duration
}

// Report is everything RunSuite measured.
type Report struct {
	Config  Config
	Targets []string
	Rows    []Row
	Memory  map[string]KeyMemory
	Log     []LogSize
	Server  string // redis_version
	Elapsed time.Duration
	// LoadBefore and LoadAfter are the machine's 1-minute load average
	// when the run started and ended ("" where unknown): a loaded machine
	// makes every number noisier.
	LoadBefore, LoadAfter string
}

// Row returns the row of target at concurrency c.
func (r *Report) Row(target string, c int) (Row, bool) {
	for _, row := range r.Rows {
		if row.Target == target && row.Concurrency == c {
			return row, true
		}
	}
	return Row{}, false
}

// Ratio compares target's throughput with the baseline's at concurrency c.
// Each round measured both within seconds of each other, so each round
// gives one ratio of their rates; Ratio returns the median and quartiles
// of those ratios, which a burst of outside load during one run moves
// less than it moves the pooled rates. All zero when either is missing.
func (r *Report) Ratio(target string, c int) (median, p25, p75 float64) {
	t, ok1 := r.Row(target, c)
	b, ok2 := r.Row(RedisRate, c)
	if !ok1 || !ok2 || len(t.Rounds) != len(b.Rounds) || len(t.Rounds) == 0 {
		return 0, 0, 0
	}
	var qs []float64
	for i := range t.Rounds {
		if base := b.Rounds[i].PerSecond(); base > 0 {
			qs = append(qs, t.Rounds[i].PerSecond()/base)
		}
	}
	if len(qs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(qs)
	return quantile(qs, 0.5), quantile(qs, 0.25), quantile(qs, 0.75)
}

// quantile interpolates linearly between the order statistics of sorted.
func quantile(sorted []float64, q float64) float64 {
	x := q * float64(len(sorted)-1)
	i := int(x)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (x-float64(i))*(sorted[i+1]-sorted[i])
}

// RunSuite measures every target on client: throughput and latency at each
// concurrency, then memory per key. The client's pool must hold at least
// as many connections as the largest concurrency.
func RunSuite(ctx context.Context, client *redis.Client, cfg Config) (*Report, error) {
	cfg.defaults()
	begin := time.Now()
	targets, err := Targets(client, nil)
	if err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Memory: map[string]KeyMemory{}, LoadBefore: loadAverage()}
	if s, err := redisinfo.Read(ctx, client); err == nil {
		rep.Server = s.Version
	}
	for _, t := range targets {
		rep.Targets = append(rep.Targets, t.Name)
	}
	ids := KeyIDs(cfg.Keys)
	maxConc := 1
	for _, c := range cfg.Concurrency {
		maxConc = max(maxConc, c)
	}
	for _, t := range targets {
		r := Run(ctx, t, Load{Concurrency: maxConc, Duration: cfg.Warmup, IDs: ids, Seed: 1})
		if r.Errors > 0 {
			return nil, fmt.Errorf("%s: warm-up: %d errors, first: %w", t.Name, r.Errors, r.FirstErr)
		}
	}

	type cell struct {
		runs      []Result
		server    redisinfo.Snapshot
		clientCPU time.Duration
	}
	cells := map[[2]int]*cell{}
	for round := range cfg.Rounds {
		for _, c := range cfg.Concurrency {
			for j := range targets {
				ti := (j + round) % len(targets)
				t := targets[ti]
				before, err := redisinfo.Read(ctx, client)
				if err != nil {
					return nil, err
				}
				cpu0 := sysstat.ProcessCPU()
				r := Run(ctx, t, Load{
					Concurrency: c,
					Duration:    cfg.Duration / time.Duration(cfg.Rounds),
					IDs:         ids,
					Seed:        uint64(round*1000 + c),
				})
				cpu := sysstat.ProcessCPU() - cpu0
				after, err := redisinfo.Read(ctx, client)
				if err != nil {
					return nil, err
				}
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				if r.Errors > 0 {
					return nil, fmt.Errorf("%s c%d: %d errors, first: %w", t.Name, c, r.Errors, r.FirstErr)
				}
				k := [2]int{ti, c}
				if cells[k] == nil {
					cells[k] = &cell{}
				}
				cells[k].runs = append(cells[k].runs, r)
				cells[k].clientCPU += cpu
				cells[k].server = cells[k].server.Add(after.Sub(before))
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "round %d/%d  %-22s c%-3d %7.0f/s  p50 %4.0fµs  p99 %5.0fµs\n",
						round+1, cfg.Rounds, t.Name, c, r.PerSecond(),
						float64(r.Quantile(0.5))/1e3, float64(r.Quantile(0.99))/1e3)
				}
			}
		}
	}
	for ti, t := range targets {
		for _, c := range cfg.Concurrency {
			cl := cells[[2]int{ti, c}]
			rep.Rows = append(rep.Rows, Row{Target: t.Name, Concurrency: c, Rounds: cl.runs, Result: Merge(cl.runs...), Server: cl.server, ClientCPU: cl.clientCPU})
		}
	}

	memIDs := KeyIDs(cfg.MemoryKeys)
	// The same scripts, over an hour rather than a second, so that the
	// bucket keys outlive a millisecond's TTL; see MeasureKeyMemory.
	memTargets, err := memoryTargets(client)
	if err != nil {
		return nil, err
	}
	for _, t := range memTargets {
		m, err := MeasureKeyMemory(ctx, client, t, memIDs)
		if err != nil {
			return nil, err
		}
		rep.Memory[t.Name] = m
	}
	rep.Log, err = MeasureLogMemory(ctx, client, cfg.LogSizes)
	if err != nil {
		return nil, err
	}
	rep.Elapsed = time.Since(begin)
	rep.LoadAfter = loadAverage()
	return rep, nil
}

// loadAverage is the 1-minute load average, or "" where unknown.
func loadAverage() string {
	avg, ok := sysstat.LoadAvg()
	if !ok {
		return ""
	}
	return strconv.FormatFloat(avg[0], 'f', 2, 64)
}

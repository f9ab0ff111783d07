package worker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet's calls and 429s per downstream, for the page: every worker
// adds what its own sluice_downstream_responses_total grew by to a hash
// per downstream and five minutes in Redis, once a second (flushFleet), off
// the path of any job; the page reads the last few minutes of every
// downstream it lists (fleetSeries).
//
// A block's hash has a field per fleetBucket of it, "c" and the
// bucket's number for the calls, "r" and the number for the 429s, and
// expires fleetKeep after the block's last write.

const (
	fleetBucket  = 5 * time.Second // one point of the page's chart
	fleetBuckets = 60              // points in the chart: five minutes
	fleetBlock   = 5 * time.Minute // one hash: the chart spans at most two
	fleetKeep    = 2 * fleetBlock  // a block's hash outlives the chart
	fleetPrefix  = "sluice:q:calls"
)

// fleetKey is the hash of downstream's counts in the block numbered
// block (Unix time over fleetBlock), with the queue's hash tag: one worker's
// flush and one view's read each go to one Redis node.
func fleetKey(queue, downstream string, block int64) string {
	return fleetPrefix + ":{" + queue + "}:" + downstream + ":" + strconv.FormatInt(block, 10)
}

// fleetFlush is what a worker has added to the fleet's counts so far.
type fleetFlush struct {
	mu           sync.Mutex
	all, refused map[string]float64
}

// flushFleet adds to the fleet's counts what all and refused (this
// worker's responses and 429s per downstream since it started) grew by
// since the last flush that succeeded: one pipeline, two commands for
// each downstream called since (three with 429s), none when nothing was
// called. A failed flush is retried with the next one, so counts are
// late rather than lost.
func (w *Worker) flushFleet(ctx context.Context, now time.Time, all, refused map[string]float64) error {
	f := &w.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	b := now.UnixNano() / int64(fleetBucket)
	pipe := w.client.Pipeline()
	for name, n := range all {
		calls := int64(n - f.all[name])
		if calls <= 0 {
			continue
		}
		key := fleetKey(w.policy.Queue.Name, name, now.UnixNano()/int64(fleetBlock))
		pipe.HIncrBy(ctx, key, "c"+strconv.FormatInt(b, 10), calls)
		if r := int64(refused[name] - f.refused[name]); r > 0 {
			pipe.HIncrBy(ctx, key, "r"+strconv.FormatInt(b, 10), r)
		}
		pipe.Expire(ctx, key, fleetKeep)
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("sluice: the fleet's call counts: %w", err)
	}
	f.all, f.refused = all, refused
	return nil
}

// fleetSeries is one downstream's fleet-wide counts per fleetBucket,
// oldest first, the last one the bucket of now (still filling).
type fleetSeries struct {
	Calls, Refused [fleetBuckets]int64
}

// lastMinute sums the calls and 429s of the last minute's buckets.
func (s *fleetSeries) lastMinute() (calls, refused int64) {
	for i := fleetBuckets - int(time.Minute/fleetBucket); i < fleetBuckets; i++ {
		calls += s.Calls[i]
		refused += s.Refused[i]
	}
	return calls, refused
}

// readFleet reads the fleet's counts of downstreams over the chart's
// span ending now: one pipeline of two HGETALLs a downstream, its
// block of now and the one before.
func (w *Worker) readFleet(ctx context.Context, now time.Time, downstreams []string) (map[string]*fleetSeries, error) {
	last := now.UnixNano() / int64(fleetBucket)
	first := last - fleetBuckets + 1
	pipe := w.client.Pipeline()
	cmds := make(map[string][]*redis.MapStringStringCmd, len(downstreams))
	for _, name := range downstreams {
		block := now.UnixNano() / int64(fleetBlock)
		for _, b := range []int64{block - 1, block} {
			cmds[name] = append(cmds[name], pipe.HGetAll(ctx, fleetKey(w.policy.Queue.Name, name, b)))
		}
	}
	out := make(map[string]*fleetSeries, len(downstreams))
	if len(cmds) == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return out, fmt.Errorf("sluice: the fleet's call counts: %w", err)
	}
	for name, cs := range cmds {
		s := &fleetSeries{}
		for _, c := range cs {
			for field, v := range c.Val() {
				if len(field) < 2 {
					continue
				}
				b, err1 := strconv.ParseInt(field[1:], 10, 64)
				n, err2 := strconv.ParseInt(v, 10, 64)
				if err1 != nil || err2 != nil || b < first || b > last {
					continue
				}
				switch field[0] {
				case 'c':
					s.Calls[b-first] += n
				case 'r':
					s.Refused[b-first] += n
				}
			}
		}
		out[name] = s
	}
	return out, nil
}

// Package admission holds the admission benchmarks of docs/algorithms.md,
// run by bench/cmd/admission: the throughput and latency of each of
// sluice's five Redis algorithms beside go-redis/redis_rate's GCRA, and the
// Redis memory each keeps per key.
//
// Every target runs on the same client against the same server, with the
// same policy (Limit per Period, Burst equal to Limit for the buckets) and
// the same key distribution: each call picks one of a fixed set of keys
// uniformly at random.
package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

// The policy every target enforces. With DefaultKeys keys, a key sees a few
// dozen calls per second at most on a small machine, so nearly every call
// is admitted and each target does its full write path.
const (
	DefaultLimit  = 1000
	DefaultPeriod = time.Second
	// DefaultKeys is how many distinct keys the calls are spread over.
	DefaultKeys = 1000
)

// RedisRate is the name of the baseline target.
const RedisRate = "redis_rate"

// Target is one limiter under test.
type Target struct {
	// Name is the algorithm's policy name for sluice's targets, RedisRate
	// for the baseline.
	Name string
	// Allow makes one decision of cost 1 for id.
	Allow func(ctx context.Context, id string) (allowed bool, err error)
	// RedisKey is the Redis key that holds id's state.
	RedisKey func(id string) string
}

// Sluice returns the target for one of sluice's algorithms on client, with
// limit per period (and a burst of limit for the buckets) and opts (nil for
// the defaults).
func Sluice(client redis.Scripter, alg algorithms.Algorithm, limit int64, period time.Duration, opts *algorithms.RedisOptions) (Target, error) {
	p := algorithms.Policy{Algorithm: alg, Limit: limit, Period: period}
	if alg == algorithms.TokenBucket || alg == algorithms.GCRA {
		p.Burst = limit
	}
	l, err := algorithms.NewRedis(client, p, opts)
	if err != nil {
		return Target{}, err
	}
	return Target{
		Name: string(alg),
		Allow: func(ctx context.Context, id string) (bool, error) {
			d, err := l.AllowN(ctx, id, 1)
			return d.Allowed, err
		},
		RedisKey: func(id string) string {
			k, err := l.Key(id)
			if err != nil {
				panic(err) // ids come from KeyIDs and are never empty
			}
			return k
		},
	}, nil
}

// Baseline returns go-redis/redis_rate's Allow (GCRA) on client, with the
// same rate and burst as the sluice targets.
func Baseline(client *redis.Client, limit int, period time.Duration) Target {
	rl := redis_rate.NewLimiter(client)
	lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: period}
	return Target{
		Name: RedisRate,
		Allow: func(ctx context.Context, id string) (bool, error) {
			r, err := rl.Allow(ctx, id, lim)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		},
		// redis_rate names its keys "rate:" + key.
		RedisKey: func(id string) string { return "rate:" + id },
	}
}

// Targets returns the five sluice algorithms, in the order of
// algorithms.Algorithms, followed by the baseline, all on client with the
// default policy. opts go to the sluice targets (nil for the defaults).
func Targets(client *redis.Client, opts *algorithms.RedisOptions) ([]Target, error) {
	var ts []Target
	for _, alg := range algorithms.Algorithms {
		t, err := Sluice(client, alg, DefaultLimit, DefaultPeriod, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", alg, err)
		}
		ts = append(ts, t)
	}
	return append(ts, Baseline(client, DefaultLimit, DefaultPeriod)), nil
}

// memoryTargets are Targets' algorithms at DefaultLimit an hour, with
// redis_rate's baseline as in Targets: the keys they store hold the same
// fields as at a second, and live long enough to be measured.
func memoryTargets(client *redis.Client) ([]Target, error) {
	var ts []Target
	for _, alg := range algorithms.Algorithms {
		t, err := Sluice(client, alg, DefaultLimit, time.Hour, &algorithms.RedisOptions{Prefix: "bench:mem"})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", alg, err)
		}
		ts = append(ts, t)
	}
	return append(ts, Baseline(client, DefaultLimit, DefaultPeriod)), nil
}

// KeyIDs returns n distinct limited keys, shaped like tenant ids.
func KeyIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("tenant-%05d", i)
	}
	return ids
}

// Goal is the throughput docs/algorithms.md asks of a sluice target, as a
// fraction of redis_rate's at the same concurrency: 0.8 for the sliding
// log, 1 for the others, 0 for the baseline itself.
func Goal(name string) float64 {
	switch name {
	case RedisRate:
		return 0
	case string(algorithms.SlidingWindowLog):
		return 0.8
	}
	return 1
}

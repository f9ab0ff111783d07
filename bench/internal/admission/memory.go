package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

// KeyMemory is what one target keeps in Redis per limited key after one
// admitted call.
type KeyMemory struct {
	// Bytes is MEMORY USAGE (SAMPLES 0: every element counted) averaged
	// over the keys. It includes the key's name and Redis's per-key
	// overhead (dictionary entry, expiry entry).
	Bytes float64
	// NameBytes is the length of the Redis key's name for the first id.
	NameBytes int
	// Encoding is OBJECT ENCODING of the first key.
	Encoding string
}

// MeasureKeyMemory deletes the keys of ids for t, makes one call for each,
// and reports their average MEMORY USAGE. It works in small batches (calls,
// then one pipeline of MEMORY USAGE), so that a key is measured within
// milliseconds of its call: a bucket key whose one call of cost 1 left it
// one emission interval from full has a TTL of just that interval (1ms at
// 1000/s) under sluice's server clock, and redis_rate's a second. Measure
// sluice's buckets at a rate an hour (memoryTargets: the state stored is
// the same) or they may be gone already.
func MeasureKeyMemory(ctx context.Context, client *redis.Client, t Target, ids []string) (KeyMemory, error) {
	if len(ids) == 0 {
		return KeyMemory{}, fmt.Errorf("no ids")
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = t.RedisKey(id)
	}
	if err := client.Del(ctx, keys...).Err(); err != nil {
		return KeyMemory{}, err
	}
	const batch = 50
	var sum int64
	var enc string
	for lo := 0; lo < len(ids); lo += batch {
		hi := min(lo+batch, len(ids))
		for _, id := range ids[lo:hi] {
			ok, err := t.Allow(ctx, id)
			if err != nil {
				return KeyMemory{}, fmt.Errorf("%s: %w", t.Name, err)
			}
			if !ok {
				return KeyMemory{}, fmt.Errorf("%s: first call for %q refused", t.Name, id)
			}
		}
		cmds := make([]*redis.IntCmd, hi-lo)
		pipe := client.Pipeline()
		for i, k := range keys[lo:hi] {
			cmds[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		encCmd := pipe.ObjectEncoding(ctx, keys[lo])
		if _, err := pipe.Exec(ctx); err != nil {
			return KeyMemory{}, fmt.Errorf("%s: MEMORY USAGE (has the key expired?): %w", t.Name, err)
		}
		for _, c := range cmds {
			sum += c.Val()
		}
		if enc == "" {
			enc = encCmd.Val()
		}
	}
	if err := client.Del(ctx, keys...).Err(); err != nil {
		return KeyMemory{}, err
	}
	return KeyMemory{
		Bytes:     float64(sum) / float64(len(keys)),
		NameBytes: len(keys[0]),
		Encoding:  enc,
	}, nil
}

// LogSize is the memory of one sliding-log key holding Entries entries.
type LogSize struct {
	Entries  int
	Bytes    int64
	Encoding string
}

// MeasureLogMemory fills one sliding-window-log key with each of sizes
// entries (one call of that cost, on a policy whose limit is the largest
// size) and reports its MEMORY USAGE.
func MeasureLogMemory(ctx context.Context, client *redis.Client, sizes []int) ([]LogSize, error) {
	most := 1
	for _, n := range sizes {
		most = max(most, n)
	}
	l, err := algorithms.NewRedis(client, algorithms.Policy{
		Algorithm: algorithms.SlidingWindowLog, Limit: int64(most), Period: time.Hour,
	}, &algorithms.RedisOptions{Prefix: "bench:logmem"})
	if err != nil {
		return nil, err
	}
	const id = "tenant-logmem"
	key, err := l.Key(id)
	if err != nil {
		return nil, err
	}
	out := make([]LogSize, 0, len(sizes))
	for _, n := range sizes {
		if err := l.Reset(ctx, id); err != nil {
			return nil, err
		}
		d, err := l.AllowN(ctx, id, int64(n))
		if err != nil {
			return nil, err
		}
		if !d.Allowed {
			return nil, fmt.Errorf("sliding log: %d entries refused", n)
		}
		card, err := client.ZCard(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		if card != int64(n) {
			return nil, fmt.Errorf("sliding log: %d entries stored, want %d", card, n)
		}
		b, err := client.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			return nil, err
		}
		enc, err := client.ObjectEncoding(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, LogSize{Entries: n, Bytes: b, Encoding: enc})
	}
	return out, l.Reset(ctx, id)
}

package queue

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
)

// Mark is a throttle key that a worker marked full: it put a job back
// because the key's next slot was beyond max_wait or the key was paused,
// and until Until the dispatchers hand over no job of that key.
type Mark struct {
	// Downstream is the job's downstream.
	Downstream string
	// Tenant is the tenant of a per_tenant downstream's key, "" for a
	// shared key. Its id is known for ids that key names keep as they
	// are, and for others while the tenant is asleep with its name (cut
	// to 64 bytes) in the waiting room; otherwise Tenant is "" and
	// Encoded says which tenant it is.
	Tenant, Encoded string
	// Until is when the mark ends (the Redis server's clock).
	Until time.Time
}

// Marked returns up to n of the throttle keys marked full now, those
// marked furthest ahead first (the busiest or longest paused): one
// ZRANGE a shard, and for tenants whose ids key names keep hashed, one
// HMGET a shard of their names in the asleep tenants' reasons. A page
// can show it whatever the number of keys.
func (p *Producer) Marked(ctx context.Context, n int) ([]Mark, error) {
	if n <= 0 {
		return nil, nil
	}
	now := strconv.FormatInt(time.Now().UnixMicro(), 10)
	var out []Mark
	for _, k := range p.shards {
		zs, err := p.client.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: k.full, Start: "+inf", Stop: "(" + now,
			ByScore: true, Rev: true, Count: int64(n)}).Result()
		if err != nil {
			return nil, err
		}
		var hashed []string
		at := map[string][]int{}
		for _, z := range zs {
			name, _ := z.Member.(string)
			m := Mark{Downstream: name, Until: time.UnixMicro(int64(z.Score))}
			if ds, enc, ok := strings.Cut(name, "/"); ok {
				m.Downstream, m.Encoded = ds, enc
				if id, plain := strings.CutPrefix(enc, "="); plain {
					m.Tenant = id
				} else {
					if _, seen := at[enc]; !seen {
						hashed = append(hashed, enc)
					}
					at[enc] = append(at[enc], len(out))
				}
			}
			out = append(out, m)
		}
		if len(hashed) == 0 {
			continue
		}
		whys, err := p.client.HMGet(ctx, k.why, hashed...).Result()
		if err != nil {
			return nil, err
		}
		for i, enc := range hashed {
			text, _ := whys[i].(string)
			id, _, _ := strings.Cut(text, "\t")
			// The reason keeps the name cut, and a claim's keeps none:
			// only a name that encodes as the mark's tenant is its own.
			if e, err := keyspace.Encode(id); err == nil && e == enc {
				for _, j := range at[enc] {
					out[j].Tenant = id
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Mark) int { return cmp.Compare(b.Until.UnixMicro(), a.Until.UnixMicro()) })
	return out[:min(n, len(out))], nil
}

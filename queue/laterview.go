package queue

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LaterTenant is one tenant's jobs for later, as Producer.Later lists
// them.
type LaterTenant struct {
	Tenant string
	// Jobs counts the tenant's jobs for later (all of them, not only
	// those read).
	Jobs int64
	// Next is when the soonest of them is due.
	Next time.Time
}

// Later lists the tenants of the soonest jobs for later (Job.RunAt),
// the soonest first, at most n of them, each with its number of jobs for
// later and when its next one is due. It reads, on each shard, the look
// soonest jobs and their tenants' counts (two commands), whatever the
// number of jobs for later: a tenant whose jobs all fall after those is
// not listed.
func (p *Producer) Later(ctx context.Context, n, look int) ([]LaterTenant, error) {
	if n <= 0 || look <= 0 {
		return nil, nil
	}
	var out []LaterTenant
	for _, k := range p.shards {
		zs, err := p.client.ZRangeWithScores(ctx, k.later, 0, int64(look-1)).Result()
		if err != nil {
			return nil, err
		}
		var encs []string
		seen := map[string]int{} // encoded tenant -> its index in out
		for _, z := range zs {
			member, _ := z.Member.(string)
			enc, it, _ := strings.Cut(member, " ")
			if _, ok := seen[enc]; ok {
				continue
			}
			tenant := enc
			if job, err := decodeItem(it); err == nil {
				tenant = job.Tenant
			}
			seen[enc] = len(out)
			encs = append(encs, enc)
			out = append(out, LaterTenant{Tenant: tenant, Next: time.UnixMicro(int64(z.Score))})
		}
		if len(encs) == 0 {
			continue
		}
		counts, err := p.client.HMGet(ctx, k.ldepth, encs...).Result()
		if err != nil {
			return nil, err
		}
		for i, enc := range encs {
			s, _ := counts[i].(string)
			out[seen[enc]].Jobs, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	slices.SortStableFunc(out, func(a, b LaterTenant) int { return a.Next.Compare(b.Next) })
	return out[:min(n, len(out))], nil
}

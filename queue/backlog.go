package queue

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Backlog is one tenant's backlog: its jobs in the waiting room.
type Backlog struct {
	// Tenant is the tenant's id.
	Tenant string
	// Jobs counts its jobs in the waiting room (TenantDepth).
	Jobs int64
}

// Backlogs returns up to n tenants with the largest backlogs, largest
// first, among at most look tenants with jobs, and how many it looked at.
// The waiting room keeps no order by backlog, so with more than look
// tenants the answer covers a random sample of them, not all: a page can
// show it whatever the number of tenants. It costs one SRANDMEMBER a shard, one
// pipeline of look LLENs and, for ids that key names do not keep as they
// are, one pipeline of up to n LINDEXes.
func (p *Producer) Backlogs(ctx context.Context, n, look int) (top []Backlog, looked int, err error) {
	if n <= 0 || look <= 0 {
		return nil, 0, nil
	}
	// An even share of look from each shard.
	var encs []string
	for i, k := range p.shards {
		share := p.shards.bound(int64(look), i)
		if share == 0 {
			continue
		}
		e, err := p.client.SRandMemberN(ctx, k.members, share).Result()
		if err != nil {
			return nil, 0, err
		}
		encs = append(encs, e...)
	}
	if len(encs) == 0 {
		return nil, 0, nil
	}
	pipe := p.client.Pipeline()
	lens := make([]*redis.IntCmd, len(encs))
	for i, e := range encs {
		lens[i] = pipe.LLen(ctx, p.shards.of(e).tenantPrefix+e)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, err
	}
	all := make([]Backlog, len(encs))
	for i, e := range encs {
		all[i] = Backlog{Tenant: e, Jobs: lens[i].Val()}
	}
	slices.SortFunc(all, func(a, b Backlog) int {
		return cmp.Or(cmp.Compare(b.Jobs, a.Jobs), strings.Compare(a.Tenant, b.Tenant))
	})
	top = all[:min(n, len(all))]
	// Key names keep short plain ids as "=" and the id; others as "#"
	// and a hash: read the tenant from the first job of its list.
	pipe = p.client.Pipeline()
	heads := make(map[int]*redis.StringCmd)
	for i, b := range top {
		if id, ok := strings.CutPrefix(b.Tenant, "="); ok {
			top[i].Tenant = id
		} else if b.Jobs > 0 {
			heads[i] = pipe.LIndex(ctx, p.shards.of(b.Tenant).tenantPrefix+b.Tenant, 0)
		}
	}
	if len(heads) > 0 {
		pipe.Exec(ctx) // a list emptied meanwhile keeps the hashed name
		for i, h := range heads {
			if job, err := decodeItem(h.Val()); err == nil {
				top[i].Tenant = job.Tenant
			}
		}
	}
	return top, len(encs), nil
}

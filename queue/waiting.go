package queue

import (
	"context"
	"strings"
)

// Waiting returns up to n of tenant's jobs in the waiting room, not yet
// handed to asynq: its due jobs in the order they will be handed over,
// then its jobs for later (RunAt), the soonest due first. Meant for tests
// and inspection (queuetest lists what a handler enqueued with it): it
// reads the tenant's whole list, and every job for later of its shard,
// in two commands. n <= 0 means every one.
func (p *Producer) Waiting(ctx context.Context, tenant string, n int) ([]Job, error) {
	k, enc, list, err := p.shards.tenant(tenant)
	if err != nil {
		return nil, err
	}
	pipe := p.client.Pipeline()
	due := pipe.LRange(ctx, list, 0, -1)
	later := pipe.ZRange(ctx, k.later, 0, -1) // "<encoded tenant> <entry>", by due time
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	items := due.Val()
	for _, m := range later.Val() {
		if it, ok := strings.CutPrefix(m, enc+" "); ok {
			items = append(items, it)
		}
	}
	var jobs []Job
	for _, it := range items {
		if n > 0 && len(jobs) == n {
			break
		}
		j, err := decodeItem(it)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, *j)
	}
	return jobs, nil
}

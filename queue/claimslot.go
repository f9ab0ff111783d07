package queue

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/throttle"
)

// claimBooks are the downstreams whose slots the claim books as it hands
// their jobs over (queue_claim.lua), rather than each worker with a round
// trip of its own: a per-tenant quota of one rate that learns nothing and
// leases no concurrency (throttle.ClaimBucket), named so that the
// tenant's throttle key lives in its shard's hash slot (ThrottleKey).
// The server notes them at its start from ServerConfig.DownstreamNames,
// and from the jobs it runs: a downstream it was not told of has its
// first jobs booked by their workers, the rest by the claim.
type claimBooks struct {
	mu   sync.Mutex
	seen sync.Map              // downstream name -> struct{}: decided
	args atomic.Pointer[[]any] // in fives: name, rl, pr, burst, guard
}

// note decides, once per downstream name, whether the claim books d's
// slots.
func (b *claimBooks) note(d Downstream, name string) {
	if _, seen := b.seen.Load(name); seen {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, seen := b.seen.Load(name); seen {
		return
	}
	b.seen.Store(name, struct{}{})
	rl, pr, burst, guard, ok := throttle.ClaimBucket(d.Limit)
	if !ok || !d.PerTenant || d.Concurrency != nil || !keyspace.Tagged(longestKey(name)) {
		return
	}
	var args []any
	if old := b.args.Load(); old != nil {
		args = append(args, *old...)
	}
	args = append(args, name, rl, pr, burst, guard)
	b.args.Store(&args)
}

// longestKey is the longest per-tenant throttle key of the downstream
// (ThrottleKey): the longest shard name (a queue name of names.MaxLen
// bytes, ":", the shard's number and the salt of shardName) and a hashed
// tenant. The claim books a downstream only if every such key of it names
// its own hash tag, as the worker's then does.
func longestKey(downstream string) string {
	return "{" + strings.Repeat("q", names.MaxLen+16) + "}" + downstream + "/#" + strings.Repeat("0", 64)
}

// bucketPrefix is the name of the throttle buckets of the tenants of the
// shard whose asynq queue is queue, up to the downstream's name (see
// queue_claim.lua), or "" without a throttle.
func (s *Server) bucketPrefix(queue string) string {
	if s.cfg.Throttle == nil {
		return ""
	}
	// "-" stands for the rest of a tenant's key: a tagged key keeps its
	// name (keyspace.Tagged), so the bucket's name ends with it.
	name, err := s.cfg.Throttle.BucketKey("{" + queue + "}-")
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(name, "-")
}

// claimArgs are the claim script's arguments from its 9th on for the
// dispatcher d: the name of its shard's tenants' throttle buckets up to
// the downstream's name, then the downstreams the claim books.
func (s *Server) claimArgs(d *dispatcher) []any {
	args := s.books.args.Load()
	if d.buckets == "" || args == nil {
		return []any{""}
	}
	return append([]any{d.buckets}, *args...)
}

// place records the tenant's shard and encoded id on a job, which name
// its per-tenant throttle key (ThrottleKey).
func (s shards) place(job *Job) {
	if k, enc, _, err := s.tenant(job.Tenant); err == nil {
		job.shard, job.tenantEnc = k.queue, enc
	}
}

// throttleKey is ThrottleKey of a job of the tenant on the downstream.
func (s shards) throttleKey(downstream, tenant string, perTenant bool) string {
	job := &Job{Downstream: downstream, Tenant: tenant}
	s.place(job)
	return ThrottleKey(job, perTenant)
}

// ThrottleKey returns the throttle key of the tenant's calls to the
// downstream: the one ThrottleKey gives for such a job run by s.
func (s *Server) ThrottleKey(downstream, tenant string, perTenant bool) string {
	return s.shards.throttleKey(downstream, tenant, perTenant)
}

// ThrottleKey returns the throttle key of the tenant's calls to the
// downstream: the one ThrottleKey gives for such a job run by a server of
// the producer's queue (to pause a tenant's key, or read its state).
func (p *Producer) ThrottleKey(downstream, tenant string, perTenant bool) string {
	return p.shards.throttleKey(downstream, tenant, perTenant)
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
)

// DefaultPrefix starts every key of the waiting room.
const DefaultPrefix = "sluice:q"

// keys are the waiting room's key names for one shard of a queue, and
// the names of the asynq keys its scripts write, all with the hash tag of
// the shard's asynq queue, asynq's own (docs/queue.md, Keys).
type keys struct {
	// queue is the shard's asynq queue: the queue's name for a queue of
	// one shard, else the name, ":" and the shard's number.
	queue                                                        string
	meta, cdepth, ring, members, weights, turns, sleep, why, ids string
	// later holds the jobs not due yet (by due time); ldepth counts them
	// per tenant.
	later, ldepth string
	// full marks throttle keys whose next slot is too far away, until
	// when (sorted set).
	full string
	// held holds the ids of jobs handed over and not started yet, until
	// when (sorted set; docs/queue.md, Job ids).
	held string
	// handing holds the entries taken for the hand-over to asynq and not
	// cleared yet, by when they were taken (queue_handover.lua).
	handing string
	// ticks maps each periodic job's schedule whose tenant lives in the
	// shard to the last tick claimed (µs; Producer.EnqueueTick).
	ticks                   string
	tenantPrefix, admPrefix string
	// asynqPending is asynq's pending list, which the claims read (the
	// prefetch) and asynq's Client writes.
	asynqPending string
}

func newKeys(prefix, queue string) keys {
	tag := ":{" + queue + "}"
	k := func(kind string) string { return prefix + ":" + kind + tag }
	return keys{
		queue:        queue,
		meta:         k("meta"),
		cdepth:       k("cdepth"),
		ring:         k("ring"),
		members:      k("members"),
		weights:      k("weights"),
		turns:        k("turns"),
		sleep:        k("sleep"),
		why:          k("why"),
		ids:          k("ids"),
		later:        k("later"),
		ldepth:       k("ldepth"),
		full:         k("full"),
		held:         k("held"),
		handing:      k("handing"),
		ticks:        k("ticks"),
		tenantPrefix: k("t") + ":",
		admPrefix:    k("adm") + ":",
		asynqPending: "asynq:{" + queue + "}:pending",
	}
}

// tenant returns the encoded tenant and the key of its list.
func (k keys) tenant(id string) (enc, list string, err error) {
	enc, err = keyspace.Encode(id)
	if err != nil {
		return "", "", err
	}
	return enc, k.tenantPrefix + enc, nil
}

// admission returns the key of a tenant's admission state under alg.
func (k keys) admission(alg, enc string) string {
	return k.admPrefix + alg + ":" + enc
}

// MaxShards is the most shards a queue may have (Config.Shards).
const MaxShards = 256

// shards are the key names of every shard of a queue, by shard number.
type shards []keys

// newShards returns the keys of the n shards of queue.
func newShards(prefix, queue string, n int) shards {
	if n <= 1 {
		return shards{newKeys(prefix, queue)}
	}
	s := make(shards, n)
	for i := range s {
		s[i] = newKeys(prefix, shardName(queue, i, n))
	}
	return s
}

// shardName returns the asynq queue of shard i of a queue of n shards,
// which is its hash tag: the queue's name, ":" and i, and, when that
// name's hash slot lies outside the shard's even share of the cluster's
// slots (the i-th n-th), "-" and the smallest number that brings it
// inside. So the shards spread evenly over a Redis Cluster's masters
// (which redis-cli --cluster create gives even shares of the slots)
// whatever the queue's name, rather than as the names happen to hash.
func shardName(queue string, i, n int) string {
	name := queue + ":" + strconv.Itoa(i)
	return keyspace.FirstInSlots(i*keyspace.Slots/n, (i+1)*keyspace.Slots/n, func(salt int) string {
		if salt == 0 {
			return name
		}
		return name + "-" + strconv.Itoa(salt)
	})
}

// of returns the keys of the shard that holds the tenant encoded as enc:
// a tenant's jobs, admission state and marks all live in one shard.
func (s shards) of(enc string) keys {
	if len(s) == 1 {
		return s[0]
	}
	return s[crc32.ChecksumIEEE([]byte(enc))%uint32(len(s))]
}

// tenant returns the keys of tenant id's shard, the encoded tenant and
// the key of its list.
func (s shards) tenant(id string) (k keys, enc, list string, err error) {
	enc, err = keyspace.Encode(id)
	if err != nil {
		return keys{}, "", "", err
	}
	k = s.of(enc)
	return k, enc, k.tenantPrefix + enc, nil
}

// bound is shard i's share of a queue bound: the shares add up to the
// bound exactly, and differ by at most one.
func (s shards) bound(total int64, i int) int64 {
	n := int64(len(s))
	b := total / n
	if int64(i) < total%n {
		b++
	}
	return b
}

// index returns the number of the shard whose asynq queue is name, or -1.
func (s shards) index(name string) int {
	for i, k := range s {
		if k.queue == name {
			return i
		}
	}
	return -1
}

// queues returns the asynq queues of the shards.
func (s shards) queues() []string {
	q := make([]string, len(s))
	for i, k := range s {
		q[i] = k.queue
	}
	return q
}

// ErrShardsChanged is returned when a queue's Config.Shards differs from
// the number its waiting room was created with.
var ErrShardsChanged = errors.New("sluice: queue's shard count changed")

// checkShards records the queue's shard count in Redis on its first use,
// and refuses a config whose count differs from the one recorded: tenants
// would move to other shards, and jobs waiting in a shard beyond the new
// count would never be drained.
func checkShards(ctx context.Context, client redis.UniversalClient, prefix, queue string, n int) error {
	key := prefix + ":shards:{" + queue + "}"
	if err := client.SetNX(ctx, key, n, 0).Err(); err != nil {
		return fmt.Errorf("sluice: queue %q: recording its shard count: %w", queue, err)
	}
	got, err := client.Get(ctx, key).Int()
	if err != nil {
		return fmt.Errorf("sluice: queue %q: reading its shard count: %w", queue, err)
	}
	if got != n {
		return fmt.Errorf("%w: queue %q was created with %d shards, and this config says %d; set shards back to %d, or drain the queue and delete %s first",
			ErrShardsChanged, queue, got, n, got, key)
	}
	return nil
}

// place records the encoded tenant on a job the server runs.
func (s shards) place(job *Job) {
	if _, enc, _, err := s.tenant(job.Tenant); err == nil {
		job.tenantEnc = enc
	}
}

// ThrottleKey returns the throttle key a job's slots are taken from: its
// downstream's name for a shared bucket, or for a per-tenant quota the
// downstream's name, "/" and the tenant encoded as in key names
// (package keyspace; acme's key on shopify is "shopify/=acme"). The
// throttle makes its Redis key names from it, each in a hash slot of
// its own. It is the queue's one name of a key: the marks of keys
// full (docs/queue.md, The dispatcher) use it, and handlers that pause
// the downstream after a 429 pause this key. A Job made by hand names
// the same key as one a server runs.
func ThrottleKey(job *Job, perTenant bool) string {
	if !perTenant {
		return job.Downstream
	}
	enc, err := keyspace.Encode(job.Tenant)
	if err != nil { // an empty tenant, which no Producer accepts
		return job.Downstream + "/"
	}
	return job.Downstream + "/" + enc
}

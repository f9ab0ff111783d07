package queue

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/scripts"
)

// The jobs hash's records (queue_enqueue.lua writes one per accepted job)
// tell the Inspector where a job is. The worker keeps them true: a job put
// back takes its new task id in the put-back's own script
// (queue_untake.lua), and a job that completed is forgotten, in batches, so that the records cost a worker no round trip
// per job.

// handOver is what a job's record keeps of its task id,
// <nonce>:<moves>: the rest is the record's field, the scoped id.
func (j *Job) handOver() string { return j.nonce + ":" + strconv.Itoa(j.moves) }

// forgetBatch is the most records one forget script deletes.
const forgetBatch = 256

// forgetter deletes the records of completed jobs, a batch per shard
// every forgetEvery or forgetBatch jobs.
type forgetter struct {
	client redis.UniversalClient
	shards shards
	mu     sync.Mutex
	// due are the records to delete by shard: scoped id, task id pairs.
	due  map[int][]any
	n    int
	kick chan struct{}
}

// forgetEvery is how long a completed job's record may outlive it.
const forgetEvery = 200 * time.Millisecond

func newForgetter(client redis.UniversalClient, sh shards) *forgetter {
	return &forgetter{client: client, shards: sh, due: map[int][]any{}, kick: make(chan struct{}, 1)}
}

// add queues the record of job, which completed.
func (f *forgetter) add(job *Job) {
	i := 0
	if len(f.shards) > 1 {
		i = f.shards.index(f.shards.of(job.tenantEnc).queue)
	}
	f.mu.Lock()
	f.due[i] = append(f.due[i], job.ScopedID(), job.handOver())
	f.n++
	full := f.n >= forgetBatch
	f.mu.Unlock()
	if full {
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
}

// flush deletes the queued records. A record it cannot delete (Redis
// unreachable) stays, and says "completed or archived" (Inspector.Job).
func (f *forgetter) flush(ctx context.Context) {
	f.mu.Lock()
	due := f.due
	f.due, f.n = map[int][]any{}, 0
	f.mu.Unlock()
	for i, pairs := range due {
		k := f.shards[i]
		scripts.QueueRecord.Run(ctx, f.client, []string{k.jobs, k.ldepth}, append([]any{"forget", k.tenantPrefix}, pairs...)...)
	}
}

// loop flushes until ctx ends, then once more.
func (f *forgetter) loop(ctx context.Context) {
	t := time.NewTicker(forgetEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
		case <-f.kick:
		}
		f.flush(ctx)
	}
}

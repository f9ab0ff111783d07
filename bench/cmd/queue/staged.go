package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// staged is the least any queue that keeps jobs out of asynq until a
// worker has room must do: jobs wait in one Redis list as ready-made asynq
// tasks, and a feeder in the worker process moves them onto asynq's
// pending list in batches, with the same prefetch, batch size and wake-up
// as sluice's dispatcher, but with nothing else: no tenants, no JSON, no
// depth or ids to keep, no count-out. Round-robin across tenants and
// checking a throttle before dequeue both need such a staging area, so
// staged / asynq is the ceiling of any such design on this machine, and
// sluice / staged what sluice's own bookkeeping costs.
type staged struct {
	rc, pc  redis.UniversalClient
	poll    time.Duration
	conc    int
	srv     *asynq.Server
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
	started atomic.Int64
}

func newStaged(producers, worker redis.UniversalClient, conc int, poll time.Duration) *staged {
	return &staged{rc: worker, pc: producers, poll: poll, conc: conc}
}

func (s *staged) name() string { return "staged" }

const (
	stageKey      = "staged:{" + queueName + "}"
	pendingKey    = "asynq:{" + queueName + "}:pending"
	taskKeyPrefix = "asynq:{" + queueName + "}:t:"
	stageBatch    = 32 // sluice's dispatchBatch
)

// enqueue stages "<task id> <asynq message>", the message encoded as
// asynq's Client encodes a task with default options.
func (s *staged) enqueue(ctx context.Context, _ int, _ string, payload []byte) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	id := hex.EncodeToString(b[:])
	msg := pbBytes(nil, 1, []byte("noop"))
	msg = pbBytes(msg, 2, payload)
	msg = pbBytes(msg, 3, []byte(id))
	msg = pbBytes(msg, 4, []byte(queueName))
	msg = pbUint(msg, 5, 25)   // asynq's default MaxRetry
	msg = pbUint(msg, 8, 1800) // and default timeout, in seconds
	return s.pc.RPush(ctx, stageKey, id+" "+string(msg)).Err()
}

func pbVarint(b []byte, n uint64) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

func pbBytes(b []byte, field int, v []byte) []byte {
	b = pbVarint(b, uint64(field)<<3|2)
	b = pbVarint(b, uint64(len(v)))
	return append(b, v...)
}

func pbUint(b []byte, field int, v uint64) []byte {
	return pbVarint(pbVarint(b, uint64(field)<<3), v)
}

// feedScript tops asynq's pending list up to ARGV[1] tasks, at most
// ARGV[2] per call, writing each task's hash as asynq's Client does.
// Returns {moved, more}.
var feedScript = redis.NewScript(`
local room = tonumber(ARGV[1]) - redis.call('LLEN', KEYS[2])
if room <= 0 then return {0, 0} end
local n = math.min(room, tonumber(ARGV[2]))
local items = redis.call('LPOP', KEYS[1], n)
if not items then return {0, 0} end
local ids = {}
for i, e in ipairs(items) do
  local sp = string.find(e, ' ', 1, true)
  local id = string.sub(e, 1, sp - 1)
  redis.call('HSET', ARGV[3] .. id, 'msg', string.sub(e, sp + 1), 'state', 'pending', 'pending_since', ARGV[4])
  ids[i] = id
end
redis.call('LPUSH', KEYS[2], unpack(ids))
if #items == n and room > n then return {#items, 1} end
return {#items, 0}
`)

func (s *staged) start(started func(int)) error {
	s.srv = newAsynqServer(s.rc, s.conc, s.poll)
	// The first batch goes over before asynq's processor first looks, as
	// sluice's Server.Start does.
	s.feedOnce(context.Background())
	wakeAfter := int64(2 * s.conc) // sluice's, with its default Prefetch of 3 × Concurrency
	s.wake = make(chan struct{}, 1)
	if err := s.srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if s.started.Add(1) >= wakeAfter {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
		started(jobIndex(t.Payload()))
		return nil
	})); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.feed(ctx)
	return nil
}

// feed is sluice's dispatch loop without sluice: claim, and when the
// batch did not fill, wait for wakeAfter starts or the poll interval.
func (s *staged) feed(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		if s.feedOnce(ctx) {
			continue
		}
		timer := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-s.wake:
		}
		timer.Stop()
	}
}

// feedOnce runs one claim; it says whether the next should come at once.
func (s *staged) feedOnce(ctx context.Context) (more bool) {
	s.started.Store(0)
	v, err := feedScript.Run(ctx, s.rc, []string{stageKey, pendingKey},
		3*s.conc, stageBatch, taskKeyPrefix, time.Now().UnixNano()).Int64Slice()
	return err == nil && len(v) == 2 && v[1] == 1
}

func (s *staged) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		s.cancel = nil
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv = nil
	}
}

package queue

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// An idle fleet is cheap (docs/operations.md, An idle fleet). A process that
// has run no job and handed none over for idleAfter is quiet: its
// dispatchers no longer look for work every PollInterval but wait for
// the time the claim said (a tenant waking, a job for later coming due),
// a message on the queue's wake channel, or idleWait, whichever is
// first; and its asynq servers' processors, which poll their pending
// list and cannot be woken from outside, are held inside their dequeue
// (parkingClient) until this process hands jobs over, a message says
// another did, or idleWait passes. Producers publish on the channel when
// they add a job (at most once a wakeWindow, first and last), and a
// quiet dispatcher that hands jobs over publishes for the other
// processes' asynq servers. A message lost (Redis pub/sub delivers at
// most once) costs at most idleWait.

const (
	// idleAfter is how long a process runs and hands over nothing
	// before it is quiet.
	idleAfter = time.Second
	// idleWait is the longest a quiet process waits without a message.
	idleWait = 5 * time.Second
	// wakeWindow is the least time between two wake messages of one
	// producer: one at the first job of a window, one at its end if more
	// came meanwhile.
	wakeWindow = 50 * time.Millisecond
	// asynqCheckInterval is asynq's TaskCheckInterval: its processor
	// sleeps half to one and a half times it after an empty dequeue,
	// which parkingClient has made wait already.
	asynqCheckInterval = 10 * time.Millisecond
)

// The wake channel's messages.
const (
	wakeJob     = "job"     // a producer added a job: quiet dispatchers claim
	wakePending = "pending" // a dispatcher handed jobs over: quiet asynq servers dequeue
)

// wakeChannel is the pub/sub channel of a queue's wake messages.
func wakeChannel(prefix, queue string) string { return prefix + ":wake:{" + queue + "}" }

// wakePublisher publishes a producer's wake messages.
type wakePublisher struct {
	client  redis.UniversalClient
	channel string

	mu       sync.Mutex
	last     time.Time // the last message's
	trailing bool      // a message is due at the end of the window
}

// added publishes wakeJob for a job just added: at once when the last
// message is a wakeWindow old, else once at the end of the window. The
// first is sent before Enqueue returns, so that a command that enqueues
// one job and exits wakes the fleet.
func (w *wakePublisher) added(ctx context.Context) {
	if w == nil { // a Producer made otherwise than by NewProducer
		return
	}
	w.mu.Lock()
	now := time.Now()
	if since := now.Sub(w.last); since < wakeWindow {
		if !w.trailing {
			w.trailing = true
			time.AfterFunc(wakeWindow-since, w.trail)
		}
		w.mu.Unlock()
		return
	}
	w.last = now
	w.mu.Unlock()
	// Not sent, it costs a quiet fleet idleWait: the job is stored.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	w.client.Publish(ctx, w.channel, wakeJob)
}

func (w *wakePublisher) trail() {
	w.mu.Lock()
	w.trailing, w.last = false, time.Now()
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.client.Publish(ctx, w.channel, wakeJob)
}

// idleWake is a Server's side: whether the process is quiet, and the
// wake-ups of its parked dequeues.
type idleWake struct {
	after, wait time.Duration // idleAfter, idleWait; tests shorten them
	busy        atomic.Int64  // unix ns of the last job run or handed over here
	gen         atomic.Pointer[chan struct{}]
	stop        chan struct{}
	stopOnce    sync.Once
	channel     string
}

func newIdleWake(prefix, queue string) *idleWake {
	w := &idleWake{after: idleAfter, wait: idleWait, stop: make(chan struct{}), channel: wakeChannel(prefix, queue)}
	ch := make(chan struct{})
	w.gen.Store(&ch)
	return w
}

// touch notes that a job ran or was handed over now.
func (w *idleWake) touch() { w.busy.Store(time.Now().UnixNano()) }

// quiet reports whether nothing ran or was handed over for idleAfter.
func (w *idleWake) quiet() bool { return time.Since(time.Unix(0, w.busy.Load())) > w.after }

// woken returns a channel closed at the next broadcast.
func (w *idleWake) woken() <-chan struct{} { return *w.gen.Load() }

// broadcast wakes every parked dequeue.
func (w *idleWake) broadcast() {
	ch := make(chan struct{})
	close(*w.gen.Swap(&ch))
}

// close releases the parked dequeues for good: the server stops.
func (w *idleWake) close() { w.stopOnce.Do(func() { close(w.stop) }) }

// handed is the dispatcher's note of a claim that handed jobs over: the
// process's parked dequeues look at once, and when the process was
// quiet, the other processes' are told too (their asynq servers may be
// the ones with room).
func (s *Server) handed(ctx context.Context) {
	wasQuiet := s.wake.quiet()
	s.wake.touch()
	s.wake.broadcast()
	if wasQuiet {
		s.client.Publish(ctx, s.wake.channel, wakePending)
	}
}

// listenWake runs until ctx ends: it subscribes to the queue's wake
// channel and wakes its dispatchers whose last claim found nothing for a
// job, and its parked dequeues for jobs handed over. go-redis resubscribes
// after a lost connection; what was published meanwhile is caught by
// idleWait.
func (s *Server) listenWake(ctx context.Context) {
	ps := s.client.Subscribe(ctx, s.wake.channel)
	defer ps.Close()
	msgs := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m.Payload {
			case wakeJob:
				for _, d := range s.disp {
					if d.idle.Load() { // a busy one claims again soon anyway
						d.poke()
					}
				}
			case wakePending:
				s.wake.broadcast() // only a parked dequeue hears it
			}
		}
	}
}

// parkingClient is the client each of a Server's asynq servers is
// given: the Server's own, except for asynq's dequeue of the server's
// queues. asynq's processor dequeues its queues one after another (a
// round, in an order of its own) and sleeps its TaskCheckInterval when
// all were empty; a round that finds nothing here ends parked: it waits
// until the process hands jobs over or is told another did
// (idleWake.broadcast), for at most the server count times PollInterval,
// or idleWait in a quiet process; woken, it dequeues that queue once
// more, and then (nothing there) asynq's short sleep and the next round
// follow. A job handed over by the process's own dispatcher
// so starts at once, not after a poll. The dequeue is told by its keys
// (asynq's pending, paused, active and lease keys of one queue:
// rdb.Dequeue of the asynq pinned in go.mod); an asynq that changed them
// would only poll, every asynqCheckInterval (TestQuietServerCostsLittle
// fails then). One asynq server's processor dequeues from one goroutine
// at a time.
type parkingClient struct {
	redis.UniversalClient
	wake    *idleWake
	pending map[string]bool // the asynq pending lists of the server's shards
	// active is how long a round parks in a process that is not quiet:
	// the asynq servers between them look once a PollInterval.
	active time.Duration

	mu      sync.Mutex
	empties int             // empty dequeues in a row
	round   <-chan struct{} // the wake-up of the round under way, taken at its start
}

// EvalSha runs a script by hash, parking asynq's empty dequeue.
func (c *parkingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.park(keys, func() *redis.Cmd { return c.UniversalClient.EvalSha(ctx, sha, keys, args...) })
}

// Eval runs a script, parking asynq's empty dequeue.
func (c *parkingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.park(keys, func() *redis.Cmd { return c.UniversalClient.Eval(ctx, script, keys, args...) })
}

func (c *parkingClient) park(keys []string, run func() *redis.Cmd) *redis.Cmd {
	if !c.isDequeue(keys) {
		return run()
	}
	c.mu.Lock()
	if c.empties%len(c.pending) == 0 {
		c.round = c.wake.woken() // before the round: a wake during it is not missed
	}
	c.mu.Unlock()
	cmd := run()
	c.mu.Lock()
	if cmd.Err() != redis.Nil { // a task, or an error: asynq's round ends
		c.empties = 0
		c.mu.Unlock()
		return cmd
	}
	c.empties++
	last, round := c.empties%len(c.pending) == 0, c.round
	c.mu.Unlock()
	if !last {
		return cmd
	}
	wait := c.active
	if c.wake.quiet() {
		wait = c.wake.wait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-round:
		// Woken: this queue first, where the process's own hand-over
		// of a queue of one shard is; another's is the next round's.
		c.mu.Lock()
		c.round = c.wake.woken()
		c.mu.Unlock()
		if again := run(); again.Err() != redis.Nil {
			c.mu.Lock()
			c.empties = 0
			c.mu.Unlock()
			return again
		}
	case <-t.C:
	case <-c.wake.stop:
	}
	return cmd
}

// isDequeue reports whether keys are those of asynq's dequeue of one of
// the server's queues.
func (c *parkingClient) isDequeue(keys []string) bool {
	if len(keys) != 4 || !c.pending[keys[0]] {
		return false
	}
	q := strings.TrimSuffix(keys[0], "pending")
	return keys[1] == q+"paused" && keys[2] == q+"active" && keys[3] == q+"lease"
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/internal/scripts"
)

// startBatch is the most starts one queue_start call records.
const startBatch = 64

// startReq is a job's request to be counted started. reply has room for
// the answer, so the recorder never waits for a waiter that has gone.
type startReq struct {
	job   *Job
	enc   string // the tenant, encoded
	reply chan startAnswer
}

// startAnswer is the recorder's answer to one job: counted out now, or
// started already (a retry, a duplicate), or the batch's error.
type startAnswer struct {
	started bool
	err     error
}

// errStopped answers a start asked of a Server that has shut down (an
// abandoned handler asynq no longer waits for).
var errStopped = errors.New("sluice: server stopped")

// startRecorder records the starts of a Server's jobs by group commit:
// one queue_start call for the starts that are pending together.
type startRecorder struct {
	reqs   chan startReq // unbuffered: a request is pending while its sender waits
	quit   chan struct{} // closed by stopRecorder
	done   chan struct{} // closed when the loop has returned
	cancel context.CancelFunc
	once   sync.Once
}

// runRecorder starts the Server's recorder goroutine.
func (s *Server) runRecorder() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &startRecorder{reqs: make(chan startReq), quit: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	s.starts = r
	go func() {
		defer close(r.done)
		s.recordLoop(ctx, r)
	}()
}

// stopRecorder stops the recorder and waits for its goroutine. Starts
// asked afterwards fail at once. Safe to call twice, or with none started.
func (s *Server) stopRecorder() {
	r := s.starts
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.quit)
		r.cancel() // a call in flight ends: its waiters have gone
	})
	<-r.done
}

// recordLoop takes the first pending start, then every other start
// already pending (without waiting: a lone start costs one round trip, as
// it always did), up to startBatch, records them in one call and answers
// each.
func (s *Server) recordLoop(ctx context.Context, r *startRecorder) {
	batch := make([]startReq, 0, startBatch)
	for {
		select {
		case <-r.quit:
			return
		case req := <-r.reqs:
			batch = append(batch[:0], req)
		}
	more:
		for len(batch) < startBatch {
			select {
			case req := <-r.reqs:
				batch = append(batch, req)
			default:
				break more
			}
		}
		s.recordStarts(ctx, batch)
		clear(batch) // drop the jobs until the next batch overwrites them
	}
}

// recordStarts runs queue_start once for batch and answers every request
// with its own job's result, or with the call's error for all of them
// (Redis unreachable).
func (s *Server) recordStarts(ctx context.Context, batch []startReq) {
	k := s.keys
	args := make([]any, 0, 4*len(batch))
	for _, req := range batch {
		args = append(args, req.job.key(), req.enc, req.job.Class, req.job.ID)
	}
	started, err := scripts.QueueStart.Run(ctx, s.client, []string{k.handed, k.envelopes, k.meta, k.tdepth, k.cdepth, k.ids},
		args...).Int64Slice()
	if err == nil && len(started) != len(batch) {
		err = fmt.Errorf("queue_start answered %d of %d jobs", len(started), len(batch))
	}
	if err != nil {
		err = fmt.Errorf("%w: marking job started: %v", errNotFailure, err)
		for _, req := range batch {
			req.reply <- startAnswer{err: err}
		}
		return
	}
	room := false
	for i, req := range batch {
		if started[i] == 1 {
			s.cfg.Metrics.started(req.job)
			room = true
		}
	}
	if room {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	for i, req := range batch {
		req.reply <- startAnswer{started: started[i] == 1}
	}
}

// markStarted counts job out of the queue's depth before its handler
// starts, and tells whether this call did (false: it had started already,
// as a retried job has). It hands the request to the Server's recorder and
// waits for the answer; the recorder records concurrent starts in one
// round trip. When ctx ends first, markStarted returns at once; the start
// may be recorded all the same, as when the context of a lone script call
// ends while Redis runs it: the job's retry then finds it started.
func (s *Server) markStarted(ctx context.Context, job *Job, enc string) (bool, error) {
	r := s.starts
	if r == nil {
		return false, fmt.Errorf("%w: marking job started: %w", errNotFailure, errStopped)
	}
	req := startReq{job: job, enc: enc, reply: make(chan startAnswer, 1)}
	select {
	case r.reqs <- req:
	case <-ctx.Done():
		return false, fmt.Errorf("%w: marking job started: %v", errNotFailure, ctx.Err())
	case <-r.quit:
		return false, fmt.Errorf("%w: marking job started: %w", errNotFailure, errStopped)
	}
	select {
	case a := <-req.reply:
		return a.started, a.err
	case <-ctx.Done():
		select {
		case a := <-req.reply: // answered meanwhile
			return a.started, a.err
		default:
		}
		return false, fmt.Errorf("%w: marking job started: %v", errNotFailure, ctx.Err())
	}
}

package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/scripts"
)

// DefaultDeadAfter is ServerConfig.DeadAfter unless it sets one.
const DefaultDeadAfter = 5 * time.Second

// recoveredKeep is how long a recovered task's mark stays: longer than
// asynq's retry back-off of a job with asynq's default MaxRetry (25), so
// that asynq's own recovery of the task, whenever it comes, finds it.
const recoveredKeep = 7 * 24 * time.Hour

// inflight is a process's heartbeat and the jobs it runs, in sluice's own
// keys (docs/reliability.md, A worker killed mid-job): every beat
// (DeadAfter/5) the process writes its beat, and at most every flush the
// jobs that started or ended since (one script; a job that starts and
// ends between two writes is never written). A process whose beat is
// older than DeadAfter is dead: the first live process to see it takes
// its jobs (queue_recover.lua), puts each back at the head of its
// tenant's list in the waiting room, its id kept (its Idempotency-Key),
// and marks its asynq task recovered (queue_recovered.lua), so that when
// asynq's own recovery brings that task back (its lease expired, a
// retry) process completes it without running it.
type inflight struct {
	id                     string // the process's
	procs, run, recovered  string // keys
	beat, flush, deadAfter time.Duration

	mu    sync.Mutex
	runs  map[string]string // task id -> run (retry count, LF, payload), not written yet
	ended map[string]bool   // task ids written (or being written), ended since

	stop context.CancelFunc
	done chan struct{}
}

// newInflight returns the heartbeat of a new process of queue under prefix.
func newInflight(prefix, queue string, deadAfter time.Duration) *inflight {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id := hex.EncodeToString(b)
	tag := ":{" + queue + "}"
	return &inflight{id: id, procs: prefix + ":procs" + tag, run: prefix + ":run" + tag + ":" + id,
		recovered: prefix + ":recovered" + tag, deadAfter: deadAfter, beat: deadAfter / 5, flush: 100 * time.Millisecond,
		runs: map[string]string{}, ended: map[string]bool{}}
}

// runKey returns the run hash of process id.
func (f *inflight) runKey(id string) string {
	return f.run[:len(f.run)-len(f.id)] + id
}

// started records task id, run n times before (asynq's retry count), with
// its payload, as running here; the returned func records its end.
func (f *inflight) started(task string, n int, payload []byte) func() {
	f.mu.Lock()
	f.runs[task] = strconv.Itoa(n) + "\n" + string(payload)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, unwritten := f.runs[task]; unwritten {
			delete(f.runs, task)
			return
		}
		f.ended[task] = true
	}
}

// writeBeat sends the beat and the changes since the last write, and
// returns the dead processes the script named. Changes that fail to go
// are kept for the next write.
func (s *Server) writeBeat(ctx context.Context) ([]string, error) {
	f := s.alive
	f.mu.Lock()
	args := []any{f.id, f.deadAfter.Microseconds(), (f.deadAfter + recoveredKeep).Milliseconds(), len(f.ended)}
	ended := f.ended
	for task := range ended {
		args = append(args, task)
	}
	runs := f.runs
	for task, run := range runs {
		args = append(args, task, run)
	}
	f.runs, f.ended = map[string]string{}, map[string]bool{}
	f.mu.Unlock()
	dead, err := scripts.QueueAlive.Run(ctx, s.client, []string{f.procs, f.run}, args...).StringSlice()
	if err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		for task := range ended {
			f.ended[task] = true
		}
		for task, run := range runs {
			if !f.ended[task] { // else it ended meanwhile: its HDEL is harmless
				f.runs[task] = run
			}
		}
		return nil, err
	}
	return dead, nil
}

// aliveLoop beats until ctx ends, recovering the jobs of the dead
// processes it hears of.
func (s *Server) aliveLoop(ctx context.Context) {
	f := s.alive
	defer close(f.done)
	tick := time.NewTicker(f.flush)
	defer tick.Stop()
	var last time.Time
	for {
		f.mu.Lock()
		dirty := len(f.runs) > 0 || len(f.ended) > 0
		f.mu.Unlock()
		if dirty || time.Since(last) >= f.beat {
			dead, err := s.writeBeat(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("sluice: heartbeat", "queue", s.cfg.Queue, "err", err)
			} else {
				last = time.Now()
			}
			for _, id := range dead {
				s.recoverDead(ctx, id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// recoverDead takes dead process id's jobs and puts them back in the
// waiting room, each at the head of its tenant's list, due now.
func (s *Server) recoverDead(ctx context.Context, id string) {
	f := s.alive
	runKey := f.runKey(id)
	got, err := scripts.QueueRecover.Run(ctx, s.client, []string{f.procs, runKey}, id, f.deadAfter.Microseconds()).StringSlice()
	if err != nil {
		if !errors.Is(err, redis.Nil) {
			s.log.Warn("sluice: recovering a dead worker's jobs", "queue", s.cfg.Queue, "worker", id, "err", err)
		}
		return
	}
	done := []any{recoveredKeep.Microseconds()}
	for i := 0; i+1 < len(got); i += 2 {
		task, run := got[i], got[i+1]
		count, payload, _ := strings.Cut(run, "\n")
		job, err := decodeJob([]byte(payload))
		if err != nil {
			continue // asynq's recovery archives it, as process would
		}
		n, _ := strconv.Atoi(count)
		job.retried += n
		s.shards.place(job)
		job.holding = false
		if err := s.putBack(ctx, asynq.NewTask("", nil), job, 0, "recovered: its worker "+id+" died mid-job", "", true); err != nil {
			s.log.Warn("sluice: recovering a dead worker's job", "queue", s.cfg.Queue, "worker", id, "job", job.ID, "err", err)
			continue // asynq's recovery runs it
		}
		s.disp[s.shards.index(s.shards.of(job.tenantEnc).queue)].poke()
		s.metrics.recovered.Inc()
		done = append(done, task)
	}
	if len(done) == 1 {
		return
	}
	if err := scripts.QueueRecovered.Run(ctx, s.client, []string{runKey, f.recovered}, done...).Err(); err != nil {
		// The jobs are back in the waiting room; asynq's recovery runs
		// them once more: at least once.
		s.log.Warn("sluice: marking a dead worker's jobs recovered", "queue", s.cfg.Queue, "worker", id, "err", err)
	}
	s.log.Info("sluice: recovered a dead worker's jobs", "queue", s.cfg.Queue, "worker", id, "jobs", len(done)-1)
}

// recoveredElsewhere reports whether asynq task t of id task, run n times
// before, is one whose process died and whose job another process put
// back in the waiting room (recoverDead): asynq's own recovery brought it
// back (a retry, so n > 0), and it completes without running. The mark
// is taken, so a task is completed this way once.
func (s *Server) recoveredElsewhere(ctx context.Context, t *asynq.Task, task string, n int) bool {
	if n == 0 || task == "" {
		return false
	}
	if removed, err := s.client.ZRem(ctx, s.alive.recovered, task).Result(); err != nil || removed == 0 {
		return false // unknown: run it (at least once)
	}
	if w := t.ResultWriter(); w != nil {
		w.Write([]byte("recovered: its worker died mid-job, and another put the job back in sluice's waiting room"))
	}
	return true
}

// startAlive starts the heartbeat.
func (s *Server) startAlive() {
	ctx, cancel := context.WithCancel(context.Background())
	s.alive.stop, s.alive.done = cancel, make(chan struct{})
	go s.aliveLoop(ctx)
}

// stopAlive stops the heartbeat and removes the process's keys: its jobs
// are finished or back in asynq's queue.
func (s *Server) stopAlive() {
	f := s.alive
	if f.stop == nil {
		return
	}
	f.stop()
	<-f.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.client.ZRem(ctx, f.procs, f.id).Err(); err != nil {
		s.log.Warn("sluice: removing the worker's heartbeat", "queue", s.cfg.Queue, "err", err)
	}
	if err := s.client.Del(ctx, f.run).Err(); err != nil {
		s.log.Warn("sluice: removing the worker's heartbeat", "queue", s.cfg.Queue, "err", err)
	}
}

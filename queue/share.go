package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// DefaultKeyShare is the most of a process's goroutines one throttle key
// holds while other keys are active, unless ServerConfig.KeyShare sets
// it: a quarter of Concurrency, at least 1.
func DefaultKeyShare(concurrency int) int { return max(1, concurrency/4) }

// shareActive is how recently a job of another key must have come to this
// process for that key to count as active: its next job must find a
// goroutine free.
const shareActive = time.Second

// shareHold is how long a job runs (or waits for its slot) before it
// counts as holding its goroutine: a key whose calls end sooner never
// holds its share, and its jobs are never put back for it.
const shareHold = time.Second

// shares counts, per throttle key (a downstream, or a downstream/tenant
// of a per-tenant downstream), the goroutines of this process running a
// job of the key, from the start of Server.process to its end (a wait of
// up to handOverHorizon for the slot included), and keeps a slow or
// hanging key from holding those the others need (docs/queue.md, A key's
// share). A key holds its share when share of its jobs have run for
// longer than hold; then no further job of it starts while another key
// is active (a job of it runs, or came to this process in the last
// shareActive), and while none is, one starts only on a goroutine that
// leaves one free. So a job of another key finds a goroutine, while keys of
// quick calls, and one key alone, use all of them. A job refused a
// goroutine goes back to the waiting room; its tenant sleeps for at most
// recheck and is woken when a goroutine of this process frees, one tenant
// a goroutine, those of the same key first.
type shares struct {
	share, concurrency int
	recheck, hold      time.Duration

	mu      sync.Mutex
	running map[string][]time.Time // when each job running began, by key; no empty entries
	all     int                    // jobs running, any key (and none)
	// last is the key of the latest job to come; lastAt when it came, and
	// otherAt when the latest job of any other key came.
	last            string
	lastAt, otherAt time.Time
	waiting         map[string]*shareLine // tenants put back, by key
}

// shareLine is the line of tenants put back for one key's share.
type shareLine struct {
	order []waiting // in the order they joined
	in    map[string]bool
}

// newShares returns the gate of a process of concurrency goroutines.
func newShares(share, concurrency int, recheck time.Duration) *shares {
	return &shares{share: share, concurrency: concurrency, recheck: recheck, hold: shareHold,
		running: map[string][]time.Time{}, waiting: map[string]*shareLine{}}
}

// enter counts a job of key (none: "") as running from now and reports
// true, or reports false when key holds its share and the job must not
// start now. A job entered leaves with exit(key, now).
func (g *shares) enter(key string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if key != "" { // a job of no downstream is counted, never refused
		if key == g.last {
			g.lastAt = now
		} else {
			g.last, g.lastAt, g.otherAt = key, now, g.lastAt
		}
		if !g.allows(key, now) {
			return false
		}
	}
	g.running[key] = append(g.running[key], now)
	g.all++
	return true
}

// allows reports whether one more job of key may start: key does not
// hold its share, or no other key is active and starting leaves one
// goroutine free. Callers hold g.mu.
func (g *shares) allows(key string, now time.Time) bool {
	held := 0
	for _, at := range g.running[key] {
		if now.Sub(at) >= g.hold {
			held++
		}
	}
	if held < g.share {
		return true
	}
	other := g.otherAt // when a job of another key last came
	if key != g.last {
		other = g.lastAt
	}
	if g.all > len(g.running[key]) || now.Sub(other) < shareActive {
		return false // another key is active: this one keeps to its share
	}
	return g.concurrency-g.all-1 >= 1
}

// exit counts the job of key that entered at began as ended.
func (g *shares) exit(key string, began time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	runs := g.running[key]
	for i, at := range runs {
		if at.Equal(began) {
			runs[i] = runs[len(runs)-1]
			runs = runs[:len(runs)-1]
			break
		}
	}
	if len(runs) == 0 {
		delete(g.running, key)
	} else {
		g.running[key] = runs
	}
	g.all--
}

// next takes the first tenant waiting for key, else for any key, that
// joined its line less than a recheck before now (one that joined
// earlier has woken by itself).
func (g *shares) next(key string, now time.Time) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.waiting) > 0 {
		k, line := key, g.waiting[key]
		if line == nil {
			for k, line = range g.waiting {
				break
			}
		}
		w := line.order[0]
		line.order = line.order[1:]
		delete(line.in, w.enc)
		if len(line.order) == 0 {
			delete(g.waiting, k)
		}
		if now.Sub(w.since) < g.recheck {
			return w.enc, true
		}
	}
	return "", false
}

// wait puts tenant enc, whose job of key went back to the waiting room,
// in key's line; it reports true when a goroutine freed meanwhile, and the
// tenant must be woken at once instead.
func (g *shares) wait(key, enc string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.allows(key, now) {
		return true
	}
	line := g.waiting[key]
	if line == nil {
		line = &shareLine{in: map[string]bool{}}
		g.waiting[key] = line
	}
	if !line.in[enc] {
		line.in[enc] = true
		line.order = append(line.order, waiting{enc: enc, since: now})
	}
	return false
}

// overShare reports whether job of key ("" for a job of no downstream)
// may not start now; then it has put the job back in the waiting room (no
// retry spent, no goroutine held), and err is putBack's. A job that may
// start is counted until it calls done.
func (s *Server) overShare(ctx context.Context, t *asynq.Task, job *Job, key, downstream string) (done func(), over bool, err error) {
	began := time.Now()
	if s.shares.enter(key, began) {
		return func() { s.shareDone(key, began) }, false, nil
	}
	s.metrics.shareWaits.WithLabelValues(downstream).Inc()
	reason := fmt.Sprintf("share: downstream %s holds its share of this worker's %d goroutines (%d)", job.Downstream, s.cfg.Concurrency, s.shares.share)
	if err := s.putBack(ctx, t, job, s.shares.recheck, reason, "", true); err != nil {
		return nil, true, err
	}
	if s.shares.wait(key, job.tenantEnc, time.Now()) {
		s.wakeTenant(job.tenantEnc)
	}
	return nil, true, nil
}

// shareDone counts the job of key that began then as ended, and wakes a
// tenant put back for its share, if one waits: one of key's first.
func (s *Server) shareDone(key string, began time.Time) {
	s.shares.exit(key, began)
	if s.runCtx == nil || s.runCtx.Err() != nil {
		return // shutting down: the tenants wake by themselves
	}
	for {
		enc, ok := s.shares.next(key, time.Now())
		if !ok || s.wakeTenant(enc) {
			return
		}
	}
}

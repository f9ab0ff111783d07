package throttle

import (
	"sync"
	"time"
)

// localBuckets is the in-process fallback (Options.Fallback): each key
// paced at a share of its own rate by this process alone.
type localBuckets struct {
	share float64
	mu    sync.Mutex
	m     map[string]*localBucket
	ops   int
}

type localBucket struct {
	tat    time.Time // when the bucket would next be empty
	paused time.Time
}

func (l *localBuckets) reserve(key string, c compiled, n int64, book bool, now time.Time) Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.m[key]
	if b == nil {
		b = &localBucket{}
	}
	iv := time.Duration(float64(c.pr) / float64(c.rl) / l.share * float64(time.Microsecond))
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	r := Reservation{Local: true}
	if b.paused.After(now) {
		r.Paused = b.paused.Sub(now)
		if start := b.paused.Add(time.Duration(c.burst-1) * iv); tat.Before(start) {
			tat = start
		}
	}
	next := tat.Add(time.Duration(n) * iv)
	delay := max(next.Add(-time.Duration(c.burst)*iv).Sub(now), 0)
	if maxWait := time.Duration(c.maxWait) * time.Microsecond; delay > maxWait {
		r.RetryAfter = delay - maxWait
		return r
	}
	r.OK, r.Delay = true, delay
	if book {
		b.tat = next
		l.m[key] = b
	}
	return r
}

func (l *localBuckets) pause(key string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[key]
	if b == nil {
		b = &localBucket{}
		l.m[key] = b
	}
	if until.After(b.paused) {
		b.paused = until
	}
}

// sweep drops idle buckets now and then, so that many keys do not pile up.
// Callers hold l.mu.
func (l *localBuckets) sweep(now time.Time) {
	l.ops++
	if l.ops < 1024 && len(l.m) < 4096 {
		return
	}
	l.ops = 0
	for k, b := range l.m {
		if b.tat.Before(now) && b.paused.Before(now) {
			delete(l.m, k)
		}
	}
}

// pauseBoard holds the pauses this process knows of. One broadcast channel
// wakes every sleeping waiter when one is announced; each looks up its key.
type pauseBoard struct {
	mu     sync.Mutex
	ends   map[string]pauseEnd
	notify chan struct{}
}

// pauseEnd is what this process knows of the end of one key's pause.
type pauseEnd struct {
	at      int64     // µs on the scripts' clock; 0 when not known
	guess   time.Time // on the host's clock, of a pause set while Redis was unreachable
	expires time.Time // on the host's clock: when the pause may be forgotten, never early
}

// merge returns the later of e and o in each field, and whether o made
// any of them later.
func (e pauseEnd) merge(o pauseEnd) (pauseEnd, bool) {
	grew := false
	if o.at > e.at {
		e.at, grew = o.at, true
	}
	if o.guess.After(e.guess) {
		e.guess, grew = o.guess, true
	}
	if o.expires.After(e.expires) {
		e.expires, grew = o.expires, true
	}
	return e, grew
}

func newPauseBoard() *pauseBoard {
	return &pauseBoard{ends: make(map[string]pauseEnd), notify: make(chan struct{})}
}

// set records a pause of key, keeping what is known of a longer one, and
// forgets the pauses that expired by now (the host's clock).
func (p *pauseBoard) set(key string, e pauseEnd, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, old := range p.ends {
		if old.expires.Before(now) {
			delete(p.ends, k)
		}
	}
	if merged, grew := p.ends[key].merge(e); grew {
		p.ends[key] = merged
		close(p.notify)
		p.notify = make(chan struct{})
	}
}

// get returns what is known of key's pause (the zero pauseEnd, which
// voids nothing, when nothing is) and a channel closed at the next
// announcement.
func (p *pauseBoard) get(key string) (pauseEnd, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ends[key], p.notify
}

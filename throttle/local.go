package throttle

import (
	"sync"
	"time"
)

// localBuckets is the in-process fallback: each key paced at a share of its
// rate by this process alone, while Redis is unreachable.
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

func newLocalBuckets(share float64) *localBuckets {
	return &localBuckets{share: share, m: make(map[string]*localBucket)}
}

// interval is one unit's emission interval at the fallback's share of c.
func (l *localBuckets) interval(c compiled) time.Duration {
	return time.Duration(float64(c.pr) / float64(c.rl) / l.share * float64(time.Microsecond))
}

func (l *localBuckets) reserve(key string, c compiled, n int64, book bool, now time.Time) Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.m[key]
	if b == nil {
		b = &localBucket{}
	}
	iv := l.interval(c)
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
	delay := next.Add(-time.Duration(c.burst) * iv).Sub(now)
	if delay < 0 {
		delay = 0
	}
	if delay > time.Duration(c.maxWait)*time.Microsecond {
		r.RetryAfter = delay - time.Duration(c.maxWait)*time.Microsecond
		return r
	}
	r.OK, r.Delay = true, delay
	if book {
		b.tat = next
		l.m[key] = b
	}
	return r
}

func (l *localBuckets) pause(key string, c compiled, until time.Time) {
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

// pauseBoard holds the pauses this process knows of, and wakes sleeping
// waiters when one is announced. Pauses are rare, so one broadcast channel
// serves every key: woken waiters look up their own key.
type pauseBoard struct {
	mu     sync.Mutex
	until  map[string]time.Time
	notify chan struct{}
}

func newPauseBoard() *pauseBoard {
	return &pauseBoard{until: make(map[string]time.Time), notify: make(chan struct{})}
}

func (p *pauseBoard) set(key string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for k, u := range p.until {
		if u.Before(now) {
			delete(p.until, k)
		}
	}
	if until.After(p.until[key]) {
		p.until[key] = until
		close(p.notify)
		p.notify = make(chan struct{})
	}
}

// untilFor returns the end of key's pause, if one is known.
func (p *pauseBoard) untilFor(key string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.until[key]
	return u, ok
}

// signal returns a channel closed at the next announcement.
func (p *pauseBoard) signal() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

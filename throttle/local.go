package throttle

import (
	"maps"
	"sync"
	"time"
)

// localBuckets is the in-process fallback (Options.Fallback): each key
// paced at a share of its own rate by this process alone.
type localBuckets struct {
	share float64
	mu    sync.Mutex
	tats  map[string]localTAT
	ops   int
}

// localTAT is one key's bucket: when it would next be empty, and whether
// it is guarded (Limit.Guard) until guardEnd.
type localTAT struct {
	tat      time.Time
	guarded  bool
	guardEnd time.Time // tat plus the guard
}

// reserve books n units of key (or, unless book, says what it would book)
// at now, with the key paused until pausedUntil as this process knows.
func (l *localBuckets) reserve(key string, c compiled, n int64, book bool, now, pausedUntil time.Time) Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	iv := time.Duration(float64(c.pr) / float64(c.rl) / l.share * float64(time.Microsecond))
	var guard time.Duration // as in throttle_reserve.lua: none for a burst of 1, at most half the bucket
	if c.burst > 1 {
		guard = min(time.Duration(c.guard)*time.Microsecond, iv*time.Duration(c.burst)/2)
	}
	st := l.tats[key]
	guarded := guard > 0 && st.guarded && st.tat.Add(guard).After(now)
	tat := st.tat
	if tat.Before(now) {
		tat = now
	}
	r := Reservation{Local: true, Share: l.share, key: key, n: n, booked: now, compile: c}
	if pausedUntil.After(now) {
		r.Paused = pausedUntil.Sub(now)
		if start := pausedUntil.Add(time.Duration(c.burst-1) * iv); tat.Before(start) {
			tat = start
		}
	}
	next := tat.Add(time.Duration(n) * iv)
	early := next.Add(-time.Duration(c.burst) * iv).Sub(now)
	if guard > 0 && early > 0 {
		guarded = true // a call that must wait for room
	}
	if guarded {
		early += guard
	}
	delay := max(early, 0)
	if maxWait := time.Duration(c.maxWait) * time.Microsecond; delay > maxWait {
		r.RetryAfter = delay - maxWait
		return r
	}
	r.OK, r.Delay = true, delay
	if book {
		r.localBook = true
		full := next.Sub(now.Add(delay)) > time.Duration(c.burst)*iv-guard
		g := guard > 0 && (guarded || full)
		l.tats[key] = localTAT{tat: next, guarded: g, guardEnd: next.Add(guard)}
	}
	return r
}

// sweep drops idle buckets now and then, so that many keys do not pile up.
// Callers hold l.mu.
func (l *localBuckets) sweep(now time.Time) {
	l.ops++
	if l.ops < 1024 && len(l.tats) < 4096 {
		return
	}
	l.ops = 0
	maps.DeleteFunc(l.tats, func(_ string, b localTAT) bool { return b.guardEnd.Before(now) })
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

// set records a pause of key, keeping what is known of a longer one, and
// forgets the pauses that expired by now (the host's clock).
func (p *pauseBoard) set(key string, e pauseEnd, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	maps.DeleteFunc(p.ends, func(_ string, old pauseEnd) bool { return old.expires.Before(now) })
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

package throttle

import (
	"slices"
	"sync"
	"time"
)

// pairs keeps, per key, the second slots of pairs that Reserve booked
// (Options.Pairs) for the key's next calls in this process, and the pace
// of the key's recent calls here, to decide whether to book a pair.
type pairs struct {
	mu    sync.Mutex
	keys  map[string]*pairKey
	swept time.Time
}

type pairKey struct {
	spares []Reservation // booked, not yet handed out, the earliest first
	last   time.Time     // the host's clock at the key's last call here
	lead   time.Duration // how far ahead the key's last booking here was
	step   time.Duration // a unit's paced interval at that booking
	leased time.Time     // the key's last concurrency lease here
}

// key returns what is kept of key, new if nothing is. Keys idle for a
// minute are forgotten once many are known, so per-tenant keys do not
// pile up. Callers hold p.mu.
func (p *pairs) key(key string, now time.Time) *pairKey {
	if p.keys == nil {
		p.keys = map[string]*pairKey{}
	}
	if len(p.keys) > 4096 && now.Sub(p.swept) > 10*time.Second {
		p.swept = now
		for name, k := range p.keys {
			if now.Sub(k.last) > time.Minute && now.Sub(k.leased) > time.Minute {
				delete(p.keys, name)
			}
		}
	}
	k := p.keys[key]
	if k == nil {
		k = &pairKey{}
		p.keys[key] = k
	}
	return k
}

// call notes a call of cost n on key under c at now. It returns the
// earliest kept slot that fits the call and is not too late to use,
// re-based on now as if reserved then (kept slots found too late are
// dropped and counted as late). Otherwise it reports whether to book a
// pair, by the rules of docs/throttle.md (Two slots a booking): the key's
// calls here come closer together than its last slot was ahead, both
// slots will likely be within the limit's wait, and no concurrency lease
// of the key was taken here in the last minute.
func (p *pairs) call(key string, c compiled, n int64, now time.Time, m *Metrics) (r Reservation, kept, pair bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.key(key, now)
	gap := now.Sub(k.last)
	k.last = now
	for i := 0; i < len(k.spares); {
		s := k.spares[i]
		due := s.booked.Add(s.Delay)
		switch {
		case now.Sub(due) > s.maxLate():
			m.reservations.WithLabelValues(s.compile.name, "late").Inc()
			k.spares = slices.Delete(k.spares, i, i+1)
		case s.n != n || s.compile.bucket != c.bucket || s.compile.maxWait != c.maxWait || s.compile.name != c.name:
			i++
		default:
			k.spares = slices.Delete(k.spares, i, i+1)
			s.booked, s.Delay = now, max(due.Sub(now), 0)
			return s, true, false
		}
	}
	fits := k.lead+time.Duration(2*n)*k.step <= time.Duration(c.maxWait)*time.Microsecond
	return Reservation{}, false, gap < k.lead && fits && now.Sub(k.leased) > time.Minute
}

// booked records how far ahead a booking of key was and a unit's paced
// interval then, and keeps the second slot of a pair, in the order of the
// slots.
func (p *pairs) booked(key string, lead, step time.Duration, spare *Reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.keys[key]
	if k == nil {
		return
	}
	k.lead, k.step = lead, step
	if spare != nil {
		due := spare.booked.Add(spare.Delay)
		i := 0
		for i < len(k.spares) && !k.spares[i].booked.Add(k.spares[i].Delay).After(due) {
			i++
		}
		k.spares = slices.Insert(k.spares, i, *spare)
	}
}

// leased notes that this process leased a concurrency slot of key at now.
func (p *pairs) leased(key string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.key(key, now).leased = now
}

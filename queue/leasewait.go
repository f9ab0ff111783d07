package queue

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// leaseWaits wakes the tenants this process put to sleep because their
// job found every concurrency lease of its throttle key held, one tenant
// for each release of that key the process hears of (its own, and the
// fleet's): a lease given back is used at
// once, while the jobs waiting for it hold no goroutine of asynq's. A
// listener a key watches the releases (throttle.WatchReleases) from
// before a job asks for a lease until a leaseRecheck passes with no job
// asking and no tenant waiting; a tenant not woken wakes by itself after
// Server.leaseRecheck.
type leaseWaits struct {
	mu   sync.Mutex
	keys map[string]*leaseWait
	wg   sync.WaitGroup // the listeners, waited for by Shutdown
}

// leaseWait is the line of tenants waiting for a lease of one key.
type leaseWait struct {
	tenants []waiting   // in the order they were put back
	spares  []time.Time // releases heard with no tenant in line
	touched time.Time   // when a job last asked for a lease of the key
}

// waiting is one tenant in a key's line.
type waiting struct {
	enc   string    // the encoded tenant id
	since time.Time // when it joined
}

// maxSpares bounds the releases remembered with nobody in line.
const maxSpares = 64

// watch makes sure key's releases are watched before a job asks for a
// lease of key, so that a release between a refusal and the job joining
// the line is counted. Callers hold no lock.
func (w *leaseWaits) watch(s *Server, key string) *leaseWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.line(s, key)
}

// line returns key's line, starting its listener if it has none. Callers
// hold w.mu.
func (w *leaseWaits) line(s *Server, key string) *leaseWait {
	if w.keys == nil {
		w.keys = map[string]*leaseWait{}
	}
	lw := w.keys[key]
	if lw == nil {
		lw = &leaseWait{}
		w.keys[key] = lw
		rw := s.cfg.Throttle.WatchReleases(key) // now: the listener starts later
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.listen(s, key, lw, rw) }()
	}
	lw.touched = time.Now()
	return lw
}

// add puts tenant enc, whose job asked for a lease of key at asked and
// was refused, in the line of key; a release heard since asked (while the
// job was put back) wakes it at once.
func (w *leaseWaits) add(s *Server, key, enc string, asked time.Time) {
	if s.runCtx == nil || s.runCtx.Err() != nil {
		return // shutting down: the tenant wakes by itself
	}
	w.mu.Lock()
	lw := w.line(s, key)
	var spare bool
	lw.spares, spare = takeSpare(lw.spares, asked, time.Now().Add(-s.leaseRecheck))
	if spare {
		w.mu.Unlock()
		if !s.wakeTenant(enc) {
			// Woken already: the release is for the next in line.
			w.wakeNext(s, lw)
		}
		return
	}
	if !slices.ContainsFunc(lw.tenants, func(x waiting) bool { return x.enc == enc }) {
		lw.tenants = append(lw.tenants, waiting{enc: enc, since: time.Now()})
	}
	w.mu.Unlock()
}

// takeSpare takes from spares, the times of releases heard with nobody in
// line, the first heard at or after asked, and reports whether it found
// one: a release heard after a job's refusal may have freed the lease it
// wanted, however long its put-back took. Releases heard before asked
// stay for jobs refused before them; those heard before drop are
// dropped, as a tenant refused then has woken by itself.
func takeSpare(spares []time.Time, asked, drop time.Time) ([]time.Time, bool) {
	spares = slices.DeleteFunc(spares, func(at time.Time) bool { return at.Before(drop) })
	if i := slices.IndexFunc(spares, func(at time.Time) bool { return !at.Before(asked) }); i >= 0 {
		return slices.Delete(spares, i, i+1), true
	}
	return spares, false
}

// listen wakes the first tenant in key's line at each release heard. A
// tenant in line for a whole leaseRecheck has woken by itself and leaves
// the line; the listener ends when the line is empty and no job asked for
// a lease of key for a leaseRecheck, or at Shutdown.
func (w *leaseWaits) listen(s *Server, key string, lw *leaseWait, rw *throttle.ReleaseWatch) {
	defer rw.Stop()
	ctx := s.runCtx
	tick := time.NewTicker(s.leaseRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.forget(key, lw)
			w.mu.Unlock()
			return
		case <-tick.C:
			w.mu.Lock()
			lw.tenants = slices.DeleteFunc(lw.tenants, func(x waiting) bool { return time.Since(x.since) >= s.leaseRecheck })
			if len(lw.tenants) == 0 && time.Since(lw.touched) >= s.leaseRecheck {
				w.forget(key, lw)
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
		case <-rw.C:
			for range rw.Take() {
				w.wakeNext(s, lw)
			}
		}
	}
}

// wakeNext gives one release of lw's key to the first tenant in line
// that is still asleep: a tenant in line may have woken meanwhile (a job
// of it put back after the wake that took it out of the line joins it
// again, due), and a release spent on it would leave the one behind it
// asleep for a whole leaseRecheck. With nobody asleep in line the release
// is kept as a spare. Callers hold no lock.
func (w *leaseWaits) wakeNext(s *Server, lw *leaseWait) {
	for {
		w.mu.Lock()
		if len(lw.tenants) == 0 {
			if len(lw.spares) < maxSpares {
				lw.spares = append(lw.spares, time.Now())
			}
			w.mu.Unlock()
			return
		}
		enc := lw.tenants[0].enc
		lw.tenants = lw.tenants[1:]
		w.mu.Unlock()
		if s.wakeTenant(enc) {
			return
		}
	}
}

// forget drops key's line lw, if it is still key's. Callers hold w.mu.
func (w *leaseWaits) forget(key string, lw *leaseWait) {
	if w.keys[key] == lw {
		delete(w.keys, key)
	}
}

// wakeTenant ends the sleep of tenant enc, and has the dispatcher claim
// at once. It reports false when enc was not asleep (it woke meanwhile,
// or a wake is due already), and true when it woke it or could not tell.
func (s *Server) wakeTenant(enc string) bool {
	// A wake time of 0 is due: the next claim puts the tenant back in
	// the ring. XX: a tenant that woke meanwhile is left alone; CH counts
	// the sleep ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), 5*time.Second)
	defer cancel()
	k := s.shards.of(enc)
	n, err := s.client.ZAddArgs(ctx, k.sleep, redis.ZAddArgs{XX: true, LT: true, Ch: true, Members: []redis.Z{{Member: enc}}}).Result()
	if err != nil {
		s.log.Warn("sluice: waking a tenant waiting for a lease", "queue", s.cfg.Queue, "err", err)
		return true // a release passed on to the next might wake two
	}
	if n == 0 {
		return false
	}
	s.disp[s.shards.index(k.queue)].poke()
	return true
}

package queue

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseWaits wakes the tenants this process put to sleep because their
// job found every concurrency lease of its throttle key held, one tenant
// for each release of that key the process hears of (its own, and the
// fleet's with throttle.Options.Subscribe): a lease given back is used at
// once, while the jobs waiting for it hold no goroutine of asynq's. One
// goroutine a key listens while tenants wait for it; a tenant not woken
// wakes by itself after Server.leaseRecheck.
type leaseWaits struct {
	mu   sync.Mutex
	keys map[string]*leaseWait
	wg   sync.WaitGroup // the listeners, waited for by Shutdown
}

// leaseWait is the line of tenants waiting for a lease of one key.
type leaseWait struct {
	tenants []waiting // in the order they were put back
	spare   time.Time // when a release was heard with no tenant in line
}

// waiting is one tenant in a key's line.
type waiting struct {
	enc   string    // the encoded tenant id
	since time.Time // when it joined
}

// spareFor is how long a release heard with nobody in line wakes the
// next tenant to join it at once: the job that found the key busy joins
// after its put-back, a few round trips after its refusal, and a release
// in between must not be missed.
const spareFor = time.Second

// add puts tenant enc in the line of key, starting the key's listener if
// it has none; a release heard just before wakes it at once.
func (w *leaseWaits) add(s *Server, key, enc string) {
	if s.runCtx == nil || s.runCtx.Err() != nil {
		return // shutting down: the tenant wakes by itself
	}
	w.mu.Lock()
	if w.keys == nil {
		w.keys = map[string]*leaseWait{}
	}
	lw := w.keys[key]
	if lw == nil {
		lw = &leaseWait{}
		w.keys[key] = lw
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.listen(s, key, lw) }()
	}
	if !lw.spare.IsZero() && time.Since(lw.spare) < spareFor {
		lw.spare = time.Time{}
		w.mu.Unlock()
		s.wakeTenant(enc)
		return
	}
	if !slices.ContainsFunc(lw.tenants, func(x waiting) bool { return x.enc == enc }) {
		lw.tenants = append(lw.tenants, waiting{enc: enc, since: time.Now()})
	}
	w.mu.Unlock()
}

// listen wakes the first tenant in key's line at each release heard.
// A tenant in line for a whole leaseRecheck has woken by itself and
// leaves the line; the listener ends when the line is empty and a
// leaseRecheck passed with no release.
func (w *leaseWaits) listen(s *Server, key string, lw *leaseWait) {
	ctx := s.runCtx
	for {
		heard := s.cfg.Throttle.AwaitRelease(ctx, key, s.leaseRecheck)
		w.mu.Lock()
		lw.tenants = slices.DeleteFunc(lw.tenants, func(x waiting) bool { return time.Since(x.since) >= s.leaseRecheck })
		if ctx.Err() != nil || !heard && len(lw.tenants) == 0 {
			delete(w.keys, key)
			w.mu.Unlock()
			return
		}
		if !heard {
			w.mu.Unlock()
			continue
		}
		var enc string
		if len(lw.tenants) > 0 {
			enc, lw.tenants = lw.tenants[0].enc, lw.tenants[1:]
		} else {
			lw.spare = time.Now()
		}
		w.mu.Unlock()
		if enc != "" {
			s.wakeTenant(enc)
		}
	}
}

// wakeTenant ends the sleep of tenant enc (if it still sleeps), and has
// the dispatcher claim at once.
func (s *Server) wakeTenant(enc string) {
	// A wake time of 0 is due: the next claim puts the tenant back in
	// the ring. XX: a tenant that woke meanwhile is left alone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), 5*time.Second)
	defer cancel()
	if err := s.client.ZAddArgs(ctx, s.keys.sleep, redis.ZAddArgs{XX: true, LT: true, Members: []redis.Z{{Member: enc}}}).Err(); err != nil {
		s.log.Warn("sluice: waking a tenant waiting for a lease", "queue", s.cfg.Queue, "err", err)
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

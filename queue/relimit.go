package queue

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/throttle"
)

// Relimit makes the server take up its downstreams' limits again, as
// ServerConfig.Downstreams now gives them: a worker calls it after a
// reload of its policy, or when the fleet's limits bind it to stricter
// ones. A job's own slot is booked at the limits Downstreams gives when
// it runs; Relimit is for the slots the claim books, whose limits the
// server noted at its start (claimBooks). Safe for concurrent use.
func (s *Server) Relimit() {
	if s.cfg.Throttle == nil || s.cfg.Downstreams == nil {
		return
	}
	b := &s.books
	b.mu.Lock()
	defer b.mu.Unlock()
	args := []any{}
	b.seen.Range(func(k, _ any) bool {
		name := k.(string)
		d, ok := s.cfg.Downstreams(name)
		if !ok {
			return true
		}
		// As claimBooks.note decides.
		rl, pr, burst, guard, ok := throttle.ClaimBucket(d.Limit)
		if ok && d.PerTenant && d.Concurrency == nil && keyspace.Tagged(longestKey(name)) {
			args = append(args, name, rl, pr, burst, guard)
		}
		return true
	})
	b.args.Store(&args)
}

// limitsTightened is the reason a job put back by Tighten gives.
const limitsTightened = "slot: its downstream's limits tightened while it waited for its slot; booked again at the new ones"

// Tighten is Relimit for limits that got stricter (a lower rate, a
// smaller burst or cap): besides, every job of this server that booked
// its slot before the call and has not started its call goes back to the
// waiting room when its slot comes, without spending a retry, and books
// again at the new limits; its old slot passes unused. A slot booked at
// the old limits is up to a second ahead (the horizon a job waits in
// its worker): without this, the calls of that second would still leave
// at the old spacing. Safe for concurrent use.
func (s *Server) Tighten() {
	s.tightened.Add(1)
	s.Relimit()
}

// tightenings counts the calls of Tighten.
type tightenings struct{ atomic.Int64 }

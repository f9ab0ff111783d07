package queue

import (
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

package queue

import "sync/atomic"

// limitsTightened is the reason a job put back by Tighten gives.
const limitsTightened = "slot: its downstream's limits tightened while it waited for its slot; booked again at the new ones"

// Tighten tells the server that its downstreams' limits, as
// ServerConfig.Downstreams gives them, got stricter (a lower rate, a
// smaller burst or cap): every job of this server that booked its slot
// before the call and has not started its call goes back to the waiting
// room when its slot comes, without spending a retry, and books again at
// the new limits; its old slot is given back. A slot booked at the old
// limits is up to a second ahead (the horizon a job waits in its
// worker): without this, the calls of that second would still leave at
// the old spacing. A job's own slot is otherwise booked at the limits
// Downstreams gives when it runs, so looser limits need no call. Safe
// for concurrent use.
func (s *Server) Tighten() { s.tightened.Add(1) }

// tightenings counts the calls of Tighten.
type tightenings struct{ atomic.Int64 }

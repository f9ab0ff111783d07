package algorithms

import (
	"math"
	"slices"
)

// The reference model: each algorithm as a pure function of (state, now,
// cost), times and durations in microseconds. The Lua scripts in
// internal/scripts do the same arithmetic in the same order, and the
// differential tests hold them to identical decisions.

// result is a decision in microseconds.
type result struct {
	allowed   bool
	remaining int64
	reset     int64 // until full capacity
	retry     int64 // until the same cost would be admitted
}

// step is one evaluation. When write is set, next is stored for ttl (nil
// next: delete the key). Refused calls and peeks write nothing, except that
// the sliding log drops expired entries, which changes no decision.
type step struct {
	res   result
	next  any // fwState, []int64, scState, tbState or gcraState
	ttl   int64
	write bool
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 {
	return -floorDiv(-a, b)
}

// fwState is a fixed window's state: the index of the window (now / period)
// and what it has admitted.
type fwState struct{ win, count int64 }

func (c *params) fixedWindow(state any, now, n int64, consume bool) (s step) {
	st, ok := state.(fwState)
	w := floorDiv(now, c.period)
	var count int64
	if ok {
		if st.win == w {
			count = st.count
		} else if st.win > w { // the clock went back: stay in the stored window
			w, count = st.win, st.count
		}
	}
	end := (w + 1) * c.period
	s.res.allowed = count+n <= c.limit
	if s.res.allowed && consume {
		count += n
		s.next, s.ttl, s.write = fwState{w, count}, end-now, true
	}
	s.res.remaining = c.limit - count
	if count > 0 {
		s.res.reset = end - now
	}
	if !s.res.allowed {
		s.res.retry = end - now
	}
	return s
}

// slidingLog's state is the sorted list of admission times, one per unit.
func (c *params) slidingLog(state any, now, n int64, consume bool) (s step) {
	log, _ := state.([]int64)
	if k := len(log); k > 0 && log[k-1] > now {
		now = log[k-1] // never decide at a time before the newest entry
	}
	cut := now - c.period
	i, _ := slices.BinarySearch(log, cut+1) // the first entry after cut
	live := log[i:]
	count := int64(len(live))
	s.res.allowed = count+n <= c.limit
	if !s.res.allowed {
		// The oldest count+n-limit entries must leave the window first.
		s.res.retry = live[count+n-c.limit-1] + c.period - now
	}
	if consume {
		if s.res.allowed { // a new slice: the stored one is never changed
			live = slices.Concat(live, slices.Repeat([]int64{now}, int(n)))
		}
		s.write = true
		if len(live) > 0 {
			s.next = live
		}
	}
	s.res.remaining = c.limit - int64(len(live))
	if k := len(live); k > 0 {
		s.res.reset = live[k-1] + c.period - now
	}
	s.ttl = s.res.reset
	return s
}

// scState is a sliding window counter's state: the current fixed window and
// the counts admitted in it and in the window before.
type scState struct{ win, cur, prev int64 }

// scWeight is the part of the previous window's count prev that still
// overlaps the sliding window, elapsed µs into the current window, computed
// as the Lua script does.
func (c *params) scWeight(prev, elapsed int64) float64 {
	return float64(prev) * float64(c.period-elapsed) / float64(c.period)
}

// scFirstFit returns the first elapsed time, at or after from, at which
// scWeight(prev, elapsed) <= room.
func (c *params) scFirstFit(prev, room, from int64) int64 {
	e := max(c.period-int64(math.Floor(float64(room)*float64(c.period)/float64(prev))), from)
	// Absorb the rounding of the division above: a step or two at most.
	for e < c.period && c.scWeight(prev, e) > float64(room) {
		e++
	}
	for e > from && c.scWeight(prev, e-1) <= float64(room) {
		e--
	}
	return e
}

func (c *params) slidingCounter(state any, now, n int64, consume bool) (s step) {
	st, ok := state.(scState)
	w := floorDiv(now, c.period)
	var cur, prev int64
	if ok {
		switch {
		case st.win == w:
			cur, prev = st.cur, st.prev
		case st.win == w-1:
			prev = st.cur
		case st.win > w: // the clock went back: decide at the start of the stored window
			w, cur, prev = st.win, st.cur, st.prev
			now = w * c.period
		}
	}
	start := w * c.period
	elapsed := now - start
	weighted := c.scWeight(prev, elapsed)
	s.res.allowed = weighted <= float64(c.limit-cur-n)
	if s.res.allowed && consume {
		cur += n
		s.next, s.ttl, s.write = scState{w, cur, prev}, start+2*c.period-now, true
	}
	s.res.remaining = int64(max(math.Floor(float64(c.limit-cur)-weighted), 0))
	switch {
	case cur > 0:
		s.res.reset = start + 2*c.period - now
	case prev > 0:
		s.res.reset = start + c.period - now
	}
	if !s.res.allowed {
		if cur+n <= c.limit { // later in this window, as the previous one slides out
			s.res.retry = start + c.scFirstFit(prev, c.limit-cur-n, elapsed+1) - now
		} else { // in the next window, where this window's count is the previous one
			s.res.retry = start + c.period + c.scFirstFit(cur, c.limit-n, 0) - now
		}
	}
	return s
}

// tbState is a token bucket's state: tokens, in 1/pr of a unit, at last.
type tbState struct{ tokens, last int64 }

func (c *params) tokenBucket(state any, now, n int64, consume bool) (s step) {
	st, ok := state.(tbState)
	full := c.capacity * c.pr
	tokens := full
	if ok {
		tokens = st.tokens
		if now > st.last {
			// Refill; compare the elapsed time first so that a long idle
			// spell cannot overflow the product.
			if now-st.last >= ceilDiv(full-tokens, c.rl) {
				tokens = full
			} else {
				tokens += (now - st.last) * c.rl
			}
		} else {
			now = st.last // the clock went back: decide at the stored time
		}
	}
	cost := n * c.pr
	s.res.allowed = tokens >= cost
	if s.res.allowed && consume {
		tokens -= cost
		s.next, s.ttl, s.write = tbState{tokens, now}, ceilDiv(full-tokens, c.rl), true
	}
	s.res.remaining = tokens / c.pr
	s.res.reset = ceilDiv(full-tokens, c.rl)
	if !s.res.allowed {
		s.res.retry = ceilDiv(cost-tokens, c.rl)
	}
	return s
}

// gcraState is the theoretical arrival time, at + frac/rl µs (frac < rl).
type gcraState struct{ at, frac int64 }

func (c *params) gcra(state any, now, n int64, consume bool) (s step) {
	st, ok := state.(gcraState)
	full := c.capacity * c.pr // the burst tolerance, in 1/rl microseconds
	at, frac := now, int64(0)
	if ok && st.at >= now {
		at, frac = st.at, st.frac
	}
	level := (at-now)*c.rl + frac // TAT - now, in 1/rl microseconds
	inc := n * c.pr               // n emission intervals, same unit
	s.res.allowed = level+inc <= full
	if s.res.allowed && consume {
		f := frac + inc
		at += f / c.rl
		frac = f % c.rl
		level += inc
		s.next, s.ttl, s.write = gcraState{at, frac}, ceilDiv(level, c.rl), true
	}
	s.res.remaining = max(full-level, 0) / c.pr // level exceeds full only if the clock stepped back
	s.res.reset = ceilDiv(level, c.rl)
	if !s.res.allowed {
		s.res.retry = ceilDiv(level+inc-full, c.rl)
	}
	return s
}

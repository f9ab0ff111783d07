package algorithms

import (
	"math"
	"sort"
)

// This file is the reference model: each algorithm as a pure function of
// (state, now, cost). The in-process limiter runs these functions; the Lua
// scripts in internal/scripts perform the same arithmetic in the same
// order, and the differential tests hold them to identical decisions.
//
// All times are microseconds since the Unix epoch; all durations are
// microseconds. A function returns the new state and its lifetime only when
// it writes: refused calls and peeks change nothing (apart from trimming
// expired log entries, which changes no decision).

// result is a decision in microseconds.
type result struct {
	allowed   bool
	remaining int64
	reset     int64 // microseconds until full capacity
	retry     int64 // microseconds until the same cost would be admitted
}

// step is the outcome of one model evaluation.
type step[S any] struct {
	res   result
	next  S     // the state to store, when write
	ttl   int64 // lifetime of next in microseconds, when write
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

// ttlMillis is the PEXPIRE argument for a lifetime of us microseconds:
// rounded up, at least 1.
func ttlMillis(us int64) int64 {
	if us <= 0 {
		return 1
	}
	return ceilDiv(us, 1000)
}

// fwState is a fixed window's state: the index of the window (now / period)
// and what it has admitted.
type fwState struct{ win, count int64 }

func (c *params) fixedWindow(st fwState, ok bool, now, n int64, consume bool) (s step[fwState]) {
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
func (c *params) slidingLog(log []int64, now, n int64, consume bool) (s step[[]int64]) {
	if k := len(log); k > 0 && log[k-1] > now {
		now = log[k-1] // never decide at a time before the newest entry
	}
	cut := now - c.period
	i := sort.Search(len(log), func(i int) bool { return log[i] > cut })
	live := log[i:]
	count := int64(len(live))
	s.res.allowed = count+n <= c.limit
	if !s.res.allowed {
		// The oldest count+n-limit entries must leave the window first.
		s.res.retry = live[count+n-c.limit-1] + c.period - now
	}
	if consume {
		next := make([]int64, 0, len(live)+int(n))
		next = append(next, live...)
		if s.res.allowed {
			for j := int64(0); j < n; j++ {
				next = append(next, now)
			}
		}
		live = next
		s.next, s.write = next, true
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

// scWeight is the share of the previous window's count that still overlaps
// the sliding window, elapsed microseconds into the current window. The
// Lua script computes exactly this expression.
func (c *params) scWeight(prev, elapsed int64) float64 {
	return float64(prev) * float64(c.period-elapsed) / float64(c.period)
}

// scFirstFit returns the first elapsed time, at or after from, at which
// scWeight(prev, elapsed) <= room.
func (c *params) scFirstFit(prev, room, from int64) int64 {
	e := c.period - int64(math.Floor(float64(room)*float64(c.period)/float64(prev)))
	if e < from {
		e = from
	}
	// Absorb the rounding of the division above: a step or two at most.
	for e < c.period && c.scWeight(prev, e) > float64(room) {
		e++
	}
	for e > from && c.scWeight(prev, e-1) <= float64(room) {
		e--
	}
	return e
}

func (c *params) slidingCounter(st scState, ok bool, now, n int64, consume bool) (s step[scState]) {
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
	rem := math.Floor(float64(c.limit-cur) - weighted)
	if rem < 0 {
		rem = 0
	}
	s.res.remaining = int64(rem)
	switch {
	case cur > 0:
		s.res.reset = start + 2*c.period - now
	case prev > 0:
		s.res.reset = start + c.period - now
	}
	if !s.res.allowed {
		if cur+n <= c.limit {
			// Later in this window, once enough of the previous one
			// has slid out.
			s.res.retry = start + c.scFirstFit(prev, c.limit-cur-n, elapsed+1) - now
		} else {
			// In the next window, where this window's count is the
			// previous one.
			s.res.retry = start + c.period + c.scFirstFit(cur, c.limit-n, 0) - now
		}
	}
	return s
}

// tbState is a token bucket's state: tokens in units of 1/pr of a token
// (so that one microsecond adds exactly rl of them) at time last.
type tbState struct{ tokens, last int64 }

func (c *params) tokenBucket(st tbState, ok bool, now, n int64, consume bool) (s step[tbState]) {
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

// gcraState is the theoretical arrival time TAT = at + frac/rl
// microseconds, with 0 <= frac < rl: exact for any rate.
type gcraState struct{ at, frac int64 }

func (c *params) gcra(st gcraState, ok bool, now, n int64, consume bool) (s step[gcraState]) {
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

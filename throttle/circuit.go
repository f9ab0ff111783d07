package throttle

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
)

// Circuit configures a key's circuit breaker: after Failures consecutive
// failed calls of the key in one process (the caller says which calls
// failed: connection refused or reset, timeouts, 5xx), the circuit opens
// for the whole fleet, and no call of the key goes for Cooldown; then one
// call is let through as a probe (half-open): its success closes the
// circuit, its failure opens it for another Cooldown. The zero value is
// the defaults. A process asks Redis only after a failure, and while it
// knows the circuit open: a healthy key costs no round trip.
type Circuit struct {
	// Name labels the circuit's metrics (the Limit's Name).
	Name string
	// Failures is how many consecutive failures open the circuit;
	// default DefaultCircuitFailures; negative: no circuit.
	Failures int
	// Cooldown is how long the circuit stays open before a probe, and the
	// longest a probe holds the half-open circuit; default
	// DefaultCircuitCooldown.
	Cooldown time.Duration
}

// The defaults of Circuit.
const (
	DefaultCircuitFailures = 5
	DefaultCircuitCooldown = 10 * time.Second
)

// Off reports whether c sets no circuit (Failures negative).
func (c Circuit) Off() bool { return c.Failures < 0 }

func (c Circuit) filled() Circuit {
	c.Failures = cmp.Or(c.Failures, DefaultCircuitFailures)
	c.Cooldown = cmp.Or(c.Cooldown, DefaultCircuitCooldown)
	return c
}

// CircuitState is a circuit's state.
type CircuitState int

// The states of a circuit.
const (
	CircuitClosed   CircuitState = iota // calls go
	CircuitOpen                         // no call goes until the cool-down ends
	CircuitHalfOpen                     // one probe is out; the others wait for its outcome
)

// String names the state as the metrics and the page do.
func (s CircuitState) String() string {
	switch s {
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half_open"
	}
	return "closed"
}

// CircuitStatus is a key's circuit as this process knows it.
type CircuitStatus struct {
	Key, Name string
	State     CircuitState
	// Until is when this process asks again (the end of the cool-down,
	// or of the probe's wait).
	Until time.Time
}

// halfOpenPoll is the longest a call waits while another's probe is out:
// the probe's success is heard no later.
const halfOpenPoll = time.Second

// circuits is what this process knows of its keys' circuits.
type circuits struct {
	mu    sync.Mutex
	fails map[string]int            // consecutive failures counted here, by key
	known map[string]*CircuitStatus // keys not closed, as last heard
}

// maxFailCounts bounds the keys whose failures a process counts: past it
// the counts start again.
const maxFailCounts = 100000

// CircuitWait reports how long a call of key must wait for its circuit:
// 0 when it may go now (closed, or this call is the half-open probe).
// A process that knows of no failure of key asks nothing of Redis.
func (t *Throttle) CircuitWait(ctx context.Context, key string, c Circuit) (time.Duration, error) {
	if c.Off() {
		return 0, nil
	}
	c = c.filled()
	now := t.hostNow()
	cs := &t.circuits
	cs.mu.Lock()
	st := cs.known[key]
	if st == nil {
		cs.mu.Unlock()
		return 0, nil
	}
	if wait := st.Until.Sub(now); wait > 0 {
		cs.mu.Unlock()
		return wait, nil
	}
	cs.mu.Unlock()
	v, err := t.circuit(ctx, key, c, "check", false)
	if err != nil {
		return 0, err
	}
	wait := time.Duration(v[1]) * time.Microsecond
	switch v[0] {
	case 0:
		t.circuitHeard(key, c, CircuitClosed, 0)
		return 0, nil
	case 1:
		t.circuitHeard(key, c, CircuitOpen, wait)
		return wait, nil
	case 2:
		wait = min(wait, halfOpenPoll)
		t.circuitHeard(key, c, CircuitHalfOpen, wait)
		return wait, nil
	}
	// This call is the probe; the others here wait for its outcome.
	t.circuitHeard(key, c, CircuitHalfOpen, halfOpenPoll)
	return 0, nil
}

// CircuitReport records the outcome of a call of key: failed says the
// downstream failed it. A success asks nothing of Redis unless this
// process counted failures of key or knows its circuit open.
func (t *Throttle) CircuitReport(ctx context.Context, key string, c Circuit, failed bool) error {
	if c.Off() {
		return nil
	}
	c = c.filled()
	cs := &t.circuits
	cs.mu.Lock()
	if !failed {
		_, counted := cs.fails[key]
		delete(cs.fails, key)
		known := cs.known[key] != nil
		cs.mu.Unlock()
		if !known && !counted {
			return nil
		}
		v, err := t.circuit(ctx, key, c, "ok", false)
		if err != nil {
			return err
		}
		if v[2] == 1 {
			t.log.Info("sluice: circuit closed", "throttle", c.Name)
		}
		t.circuitHeard(key, c, CircuitClosed, 0)
		return nil
	}
	if cs.fails == nil || len(cs.fails) >= maxFailCounts {
		cs.fails = map[string]int{}
	}
	cs.fails[key]++
	reached := cs.fails[key] >= c.Failures
	cs.mu.Unlock()
	v, err := t.circuit(ctx, key, c, "fail", reached)
	if err != nil {
		return err
	}
	if v[0] == 0 {
		return nil
	}
	if v[2] == 1 {
		t.metrics.circuitOpens.WithLabelValues(c.Name).Inc()
		t.log.Warn("sluice: circuit opened: the downstream keeps failing", "throttle", c.Name, "cooldown", c.Cooldown)
	}
	cs.mu.Lock()
	delete(cs.fails, key)
	cs.mu.Unlock()
	t.circuitHeard(key, c, CircuitOpen, time.Duration(v[1])*time.Microsecond)
	return nil
}

// Circuits returns the circuits this process knows not closed, by key.
func (t *Throttle) Circuits() []CircuitStatus {
	cs := &t.circuits
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]CircuitStatus, 0, len(cs.known))
	for _, st := range cs.known {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// circuitHeard records key's state, heard from Redis, for wait, and
// updates sluice_circuit_state.
func (t *Throttle) circuitHeard(key string, c Circuit, state CircuitState, wait time.Duration) {
	cs := &t.circuits
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.known == nil {
		cs.known = map[string]*CircuitStatus{}
	}
	old := cs.known[key]
	if old != nil {
		t.metrics.circuitState.WithLabelValues(c.Name, old.State.String()).Dec()
	}
	if state == CircuitClosed {
		delete(cs.known, key)
		return
	}
	cs.known[key] = &CircuitStatus{Key: key, Name: c.Name, State: state, Until: t.hostNow().Add(wait)}
	t.metrics.circuitState.WithLabelValues(c.Name, state.String()).Inc()
}

// circuit runs throttle_circuit.lua for key.
func (t *Throttle) circuit(ctx context.Context, key string, c Circuit, op string, reached bool) ([]int64, error) {
	k, err := t.key("circuit", key)
	if err != nil {
		return nil, err
	}
	v, err := scripts.ThrottleCircuit.Run(ctx, t.client, []string{k}, op, reached, c.Cooldown.Microseconds(), t.now()).Int64Slice()
	if err != nil {
		return nil, callErr("circuit", err)
	}
	if len(v) != 3 {
		return nil, fmt.Errorf("sluice: throttle circuit: unexpected reply of %d values", len(v))
	}
	return v, nil
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultReplicaTimeout is the default of Config.ReplicaTimeout.
const DefaultReplicaTimeout = time.Second

// ErrNotReplicated is wrapped by a *NotReplicatedError.
var ErrNotReplicated = errors.New("sluice: the job is stored on the primary but not yet on enough replicas")

// NotReplicatedError is Enqueue's error under Config.Replicas when the
// job was stored on the primary and fewer replicas than asked had it
// when ReplicaTimeout ran out (or Redis refused WAIT: Err). The job is
// in the queue and will run, unless the primary fails before a replica
// has it: then a failover loses it. Enqueueing it again with the same
// Job.ID is safe: a *DuplicateJobError then says the first is still
// there (give jobs an ID under Replicas; a chosen one is not recorded).
//
// Any other error of Enqueue but the refusals means what it means
// without Replicas: the reply was lost (a connection cut, a timeout),
// and the job may or may not be stored.
type NotReplicatedError struct {
	Queue string
	ID    string // the job's id
	// Want is Config.Replicas; Got how many replicas acknowledged the
	// job within ReplicaTimeout.
	Want, Got int
	Err       error // WAIT's own error, if it failed
}

func (e *NotReplicatedError) Error() string {
	msg := fmt.Sprintf("%v: job %q in queue %q reached %d of %d replicas", ErrNotReplicated, e.ID, e.Queue, e.Got, e.Want)
	if e.Err != nil {
		msg += " (WAIT: " + e.Err.Error() + ")"
	}
	return msg + "; it will run unless the primary fails first; enqueue it again with the same id to be sure"
}

// Unwrap returns ErrNotReplicated and WAIT's error, if any.
func (e *NotReplicatedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrNotReplicated, e.Err}
	}
	return []error{ErrNotReplicated}
}

// acks is what WAIT answered after the enqueue script.
type acks struct {
	n   int
	err error
}

// runEnqueue runs the enqueue script s. Under Config.Replicas it sends
// WAIT in the same pipeline, on the same connection to the master that
// holds the script's keys: WAIT counts the replicas that have the writes
// of its own connection, and go-redis pools connections, so a WAIT sent
// apart could be on another. A pipeline costs no extra round trip.
func (p *Producer) runEnqueue(ctx context.Context, s *redis.Script, keys []string, args ...any) ([]any, acks, error) {
	if p.cfg.Replicas <= 0 {
		v, err := s.Run(ctx, p.client, keys, args...).Slice()
		return v, acks{}, err
	}
	var node redis.Cmdable
	switch c := p.client.(type) {
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, acks{}, err
		}
		node = m
	case *redis.Client:
		node = c
	default:
		return nil, acks{}, fmt.Errorf("sluice: Config.Replicas needs a *redis.Client or *redis.ClusterClient, not a %T", p.client)
	}
	timeout := p.cfg.ReplicaTimeout.Milliseconds()
	for _, sha := range []bool{true, false} { // EVALSHA, and EVAL if Redis lacks the script
		pipe := node.Pipeline()
		run := s.EvalSha(ctx, pipe, keys, args...)
		if !sha {
			run = s.Eval(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", p.cfg.Replicas, timeout)
		_, _ = pipe.Exec(ctx) // each command holds its own error
		v, err := run.Slice()
		if sha && redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue // nothing was written; WAIT waited for nothing
		}
		n, werr := wait.Int()
		return v, acks{n, werr}, err
	}
	panic("unreachable")
}

// replicated returns r, or a *NotReplicatedError when Config.Replicas
// asked for more replicas than a had.
func (p *Producer) replicated(r Receipt, a acks) (Receipt, error) {
	if p.cfg.Replicas <= 0 || (a.err == nil && a.n >= p.cfg.Replicas) {
		return r, nil
	}
	return Receipt{}, &NotReplicatedError{Queue: p.cfg.Queue, ID: r.ID, Want: p.cfg.Replicas, Got: a.n, Err: a.err}
}

// notReplicated is POST /enqueue's answer to a *NotReplicatedError: the
// job's id, so that the caller can send it again under that id.
func notReplicated(err error) EnqueueResponse {
	var nr *NotReplicatedError
	errors.As(err, &nr)
	return EnqueueResponse{ID: nr.ID, Error: err.Error(), Reason: "not_replicated"}
}

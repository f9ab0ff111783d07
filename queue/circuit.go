package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/throttle"
)

// Failed marks err, returned by a handler, as a failure of the
// downstream itself (such as a 5xx answer): it counts toward the
// circuit of the job's throttle key (Downstream.Circuit; docs/queue.md,
// A failing downstream's circuit), and is retried as any error is. A
// handler need not mark a connection refused or reset, or a timeout:
// DownstreamFailed recognises those. The built-in HTTP job marks its 5xx
// answers but 503 (a refusal: Refused).
func Failed(err error) error {
	if err == nil {
		return nil
	}
	return &failedError{err}
}

type failedError struct{ err error }

func (e *failedError) Error() string { return e.err.Error() }
func (e *failedError) Unwrap() error { return e.err }

// DownstreamFailed reports whether a handler's error says the downstream
// failed the call, the one classification the circuits use: an error
// marked by Failed, a connection refused, reset or cut short, a host
// that does not resolve, and a timeout (of a dial, a read or the call's
// own deadline). sluice's own refusals (a throttle's TooFarError,
// BusyError, ErrUnavailable), a cancelled context, Reschedule and
// Permanent errors are not failures of the downstream.
func DownstreamFailed(err error) bool {
	var f *failedError
	switch {
	case err == nil:
		return false
	case errors.As(err, &f):
		return true
	case errors.Is(err, errNotFailure), errors.Is(err, context.Canceled), errors.Is(err, asynq.SkipRetry),
		errors.Is(err, throttle.ErrTooFar), errors.Is(err, throttle.ErrUnavailable):
		return false
	}
	var busy *throttle.BusyError
	var re *RescheduleError
	if errors.As(err, &busy) || errors.As(err, &re) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) {
		return true
	}
	// A *url.Error is a net.Error whatever it wraps: only a timeout
	// inside one counts.
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) && errors.As(ue.Err, &ne) && ne.Timeout()
}

// circuitOpen reports whether job, of key of downstream d, must wait for
// key's circuit; then it has put the job back in the waiting room for the
// wait (no retry spent, no goroutine held), key marked so that no claim
// hands its jobs over meanwhile, and err is putBack's. Redis unreachable
// lets the job on: its slot's reservation decides.
func (s *Server) circuitOpen(ctx context.Context, t *asynq.Task, job *Job, key string, d Downstream, ok bool) (bool, error) {
	if !ok || d.Circuit.Off() {
		return false, nil
	}
	c := d.Circuit
	c.Name = d.Limit.Name
	wait, err := s.cfg.Throttle.CircuitWait(ctx, key, c)
	if err != nil || wait <= 0 {
		return false, nil
	}
	s.metrics.circuitWaits.WithLabelValues(c.Name).Inc()
	return true, s.putBack(ctx, t, job, wait, fmt.Sprintf("circuit: downstream %s keeps failing; its circuit is open", job.Downstream), key, false)
}

// circuitReport counts the outcome of job's call toward key's circuit.
func (s *Server) circuitReport(ctx context.Context, key string, d Downstream, ok bool, err error) {
	if !ok || d.Circuit.Off() {
		return
	}
	var far *throttle.TooFarError
	var busy *throttle.BusyError
	if errors.As(err, &far) || errors.As(err, &busy) {
		return // the handler did not call
	}
	c := d.Circuit
	c.Name = d.Limit.Name
	if rerr := s.cfg.Throttle.CircuitReport(context.WithoutCancel(ctx), key, c, DownstreamFailed(err)); rerr != nil {
		s.log.Warn("sluice: counting a call toward its circuit", "downstream", c.Name, "err", rerr)
	}
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/throttle"
)

// slotKey is the context key of the downstream slot the worker booked
// for the job a handler runs.
type slotKey struct{}

type slot struct {
	th *throttle.Throttle
	r  throttle.Reservation
}

// WithReservation returns ctx carrying r, booked on th, as the worker
// gives it to a handler: for tests, and for handlers run outside a Server.
func WithReservation(ctx context.Context, th *throttle.Throttle, r throttle.Reservation) context.Context {
	return context.WithValue(ctx, slotKey{}, slot{th: th, r: r})
}

// Reservation returns the slot the worker booked on the job's downstream
// before running its handler (at the job's Units), and false for a job
// that names no downstream.
func Reservation(ctx context.Context) (throttle.Reservation, bool) {
	s, ok := ctx.Value(slotKey{}).(slot)
	return s.r, ok
}

// Settle corrects the slot the worker booked for the job a handler runs
// to the call's real cost, once the downstream reports it (an LLM API's
// usage, a GraphQL API's actual cost): what the estimate (Job.Units)
// overbooked is given back, what the call overran is booked as debt that
// later calls wait for (throttle.Throttle.Settle). Call it once, with the
// handler's ctx; for a job without a downstream it does nothing.
func Settle(ctx context.Context, actual int64) error {
	s, ok := ctx.Value(slotKey{}).(slot)
	if !ok || s.th == nil {
		return nil
	}
	_, span := childSpan(ctx, "sluice.settle", trace.WithAttributes(attribute.Int64("sluice.settle.actual", actual)))
	err := s.th.Settle(context.WithoutCancel(ctx), s.r, actual)
	endSpan(span, err)
	return err
}

// CostFrom says where a downstream's responses report a call's real cost,
// for the built-in HTTP job to settle its slot: in a header field, or at
// a dotted path into a JSON body (read from at most its first 256 KiB:
// an LLM API's usage comes after its answer). The zero CostFrom reads nothing: the estimate
// stands.
type CostFrom struct {
	// Header is a response header field holding a whole number, such as
	// X-Tokens-Used.
	Header string
	// JSON is the path of object keys to a whole number in a JSON body,
	// such as ["usage", "total_tokens"].
	JSON []string
}

// ErrCostFrom is wrapped by the errors of ParseCostFrom.
var ErrCostFrom = errors.New("sluice: invalid cost_from")

// ParseCostFrom reads a CostFrom as a policy file writes it:
// "header:<field>" or "json:<key>.<key>...", as "header:X-Tokens-Used"
// or "json:usage.total_tokens".
func ParseCostFrom(s string) (CostFrom, error) {
	kind, arg, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return CostFrom{}, fmt.Errorf("%w: want header:<field> or json:<path>, such as header:X-Tokens-Used or json:usage.total_tokens, got %q", ErrCostFrom, s)
	case kind == "header":
		if arg == "" || strings.ContainsFunc(arg, func(r rune) bool { return !tokenChar(r) }) {
			return CostFrom{}, fmt.Errorf("%w: %q is no header field name", ErrCostFrom, arg)
		}
		return CostFrom{Header: http.CanonicalHeaderKey(arg)}, nil
	case kind == "json":
		path := strings.Split(arg, ".")
		for _, k := range path {
			if k == "" {
				return CostFrom{}, fmt.Errorf("%w: json path %q has an empty key; write keys joined by dots, such as usage.total_tokens", ErrCostFrom, arg)
			}
		}
		if len(path) > 16 {
			return CostFrom{}, fmt.Errorf("%w: json path %q is deeper than 16 keys", ErrCostFrom, arg)
		}
		return CostFrom{JSON: path}, nil
	default:
		return CostFrom{}, fmt.Errorf("%w: unknown source %q; want header or json", ErrCostFrom, kind)
	}
}

// tokenChar reports whether r may appear in an HTTP token (RFC 9110).
func tokenChar(r rune) bool {
	return r < 0x7f && r > ' ' && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}

// IsZero reports whether c reads nothing.
func (c CostFrom) IsZero() bool { return c.Header == "" && len(c.JSON) == 0 }

// String writes c as ParseCostFrom reads it; "" for the zero CostFrom.
func (c CostFrom) String() string {
	switch {
	case c.Header != "":
		return "header:" + c.Header
	case len(c.JSON) > 0:
		return "json:" + strings.Join(c.JSON, ".")
	}
	return ""
}

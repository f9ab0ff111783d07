package queue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algorithms"
)

// DefaultKeyFailures is the default of KeyAuth.Failures: 10 requests
// with a missing or wrong key a minute from one client address.
var DefaultKeyFailures = algorithms.Policy{Algorithm: algorithms.SlidingWindowLog, Limit: 10, Period: time.Minute}

// KeyAuth configures HTTPKeyHandler. A nil *KeyAuth means defaults.
type KeyAuth struct {
	// Failures limits the requests with a missing or wrong key from one
	// client address (an IPv4 address, or an IPv6 /64), across every
	// worker of the queue (on Redis, by sluice's admission algorithms);
	// past it such a request is answered 429 "too_many_failures" with
	// Retry-After instead of 401. A request with a valid key is neither
	// counted nor refused by it, from any address. Default
	// DefaultKeyFailures.
	Failures *algorithms.Policy
}

// HTTPKeyHandler is HTTPHandler for callers with an API key of p's queue
// (Producer.Keys), sent as "Authorization: Bearer slk_...". The job's
// tenant is the key's: a body may leave "tenant" out when the key has
// one tenant, must name one of the key's tenants when it has several, and
// naming another is answered 403 "forbidden_tenant" with nothing
// enqueued. A missing, malformed, unknown or revoked key is answered 401
// ("missing_key" or "bad_key") before the body is read; Redis
// unreachable, 503 "unavailable". Refusals carry an EnqueueResponse.
func HTTPKeyHandler(p *Producer, o *KeyAuth) (http.Handler, error) {
	pol := DefaultKeyFailures
	if o != nil && o.Failures != nil {
		pol = *o.Failures
	}
	lim, err := algorithms.NewRedis(p.client, pol, &algorithms.RedisOptions{Prefix: p.cfg.Prefix + ":authfail:" + p.cfg.Queue})
	if err != nil {
		return nil, fmt.Errorf("sluice: KeyAuth.Failures: %w", err)
	}
	return &keyAuth{keys: p.Keys(), failures: lim, next: HTTPHandler(p)}, nil
}

// keyAuth is the handler HTTPKeyHandler returns.
type keyAuth struct {
	keys     *Keys
	failures algorithms.Limiter
	next     http.Handler
}

// keyContext is the context key of the APIKey a request authenticated
// with.
type keyContext struct{}

func (a *keyAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, given := bearer(r)
	if given {
		ak, err := a.keys.Authenticate(r.Context(), key)
		if err == nil {
			a.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyContext{}, ak)))
			return
		}
		if !errors.Is(err, ErrBadKey) {
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, EnqueueResponse{Error: "the queue is unavailable; retry", Reason: "unavailable", RetryAfter: 1})
			return
		}
	}
	// "API key, else IP": a caller without a valid key is limited by its
	// address. A limiter that cannot answer refuses as 401 still.
	d, err := a.failures.AllowN(r.Context(), clientAddr(r), 1)
	if err == nil && !d.Allowed {
		w.Header().Set("Retry-After", seconds(d.RetryAfter))
		reply(w, http.StatusTooManyRequests, EnqueueResponse{Error: "too many requests with a missing or wrong API key from this address", Reason: "too_many_failures", RetryAfter: milliseconds(d.RetryAfter)})
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice enqueue"`)
	if !given {
		reply(w, http.StatusUnauthorized, EnqueueResponse{Error: "an API key is required: send Authorization: Bearer <key>", Reason: "missing_key"})
		return
	}
	reply(w, http.StatusUnauthorized, EnqueueResponse{Error: "the API key is not valid (malformed, unknown or revoked)", Reason: "bad_key"})
}

// bearer returns the credentials of r's "Authorization: Bearer" field,
// and whether r has an Authorization field at all.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return "", false
	}
	scheme, cred, _ := strings.Cut(h[0], " ")
	if len(h) != 1 || !strings.EqualFold(scheme, "Bearer") {
		return "", true // given, and wrong
	}
	return strings.TrimSpace(cred), true
}

// clientAddr is the address a request's failures count against: its
// peer's IP, an IPv6 one cut to its /64 (a host usually holds a whole
// /64, so its addresses are one caller).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "addr:" + host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// keyTenant applies the request's API key, if any, to job's tenant: it
// fills an empty tenant from a key of one tenant, and otherwise answers
// the request and reports false when the key does not name job's tenant.
func keyTenant(w http.ResponseWriter, r *http.Request, job *Job) bool {
	ak, ok := r.Context().Value(keyContext{}).(APIKey)
	switch {
	case !ok:
		return true
	case job.Tenant == "" && len(ak.Tenants) == 1:
		job.Tenant = ak.Tenants[0]
		return true
	case job.Tenant == "":
		reply(w, http.StatusBadRequest, EnqueueResponse{Error: "this API key is for several tenants: name one as \"tenant\"", Reason: "invalid"})
		return false
	}
	for _, t := range ak.Tenants {
		if t == job.Tenant {
			return true
		}
	}
	reply(w, http.StatusForbidden, EnqueueResponse{Error: "this API key does not enqueue for that tenant", Reason: "forbidden_tenant"})
	return false
}

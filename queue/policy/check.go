package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/throttle"
)

// ErrUnknownDownstream is wrapped by CheckJob's and ResolveHTTP's error
// for a job that names a downstream the policy file does not have.
var ErrUnknownDownstream = errors.New("unknown downstream")

// ErrUnknownType is wrapped by CheckJob's error for a job whose type is
// not in the file's queue.types: no worker of the queue handles it.
var ErrUnknownType = errors.New("unknown job type")

// maxTypesShown is how many known types CheckJob's error lists.
const maxTypesShown = 20

// CheckJob refuses a job that the workers of this policy could never run,
// so that the producer says so at enqueue instead of a worker archiving
// the job later (queue.Config.Check; QueueConfig sets it): one naming a
// downstream the file does not have, or whose cost (its Units, when set)
// is above the burst of its downstream or of an also rate that counts the cost; a built-in HTTP
// job whose request httpjob.ParseRequest refuses or whose url ResolveHTTP
// refuses; and, when the file lists queue.types, one of a type it does
// not list (ErrUnknownType), which would only wait in the queue and be
// archived. The tenant's own capacity is checked by the producer itself.
func (c *Config) CheckJob(job *queue.Job) error {
	if err := c.checkType(job.Type); err != nil {
		return err
	}
	if job.Type != httpjob.Type && job.Downstream == "" {
		return nil
	}
	d, err := c.named(job.Downstream)
	if job.Type == httpjob.Type {
		req, perr := httpjob.ParseRequest(job.Payload)
		if perr != nil {
			return fmt.Errorf("%s job: %w", httpjob.Type, perr)
		}
		d, err = c.ResolveHTTP(job, req.URL)
	}
	if err != nil {
		return err
	}
	// What the call books on the downstream: its units, else its cost.
	cost, what := max(job.Cost, 1), "cost"
	if job.Units > 0 {
		cost, what = job.Units, "units"
	}
	if burst := max(d.Limit.Burst, 1); cost > burst {
		return neverFits(fmt.Sprintf("%s %d exceeds downstream %q's burst of %d, so no slot could ever hold it",
			what, cost, d.Name, burst))
	}
	for i, r := range d.Limit.Also {
		if burst := max(r.Burst, 1); r.Counts == throttle.CountsCost && cost > burst {
			return neverFits(fmt.Sprintf("%s %d exceeds the burst of %d of downstream %q's also[%d] (%v), so no slot could ever hold it",
				what, cost, burst, d.Name, i, r))
		}
	}
	return nil
}

// neverFits is the error of a job whose cost or units no slot of its
// downstream can hold: its message says which burst it exceeds, and it is
// algorithms.ErrCostExceedsCapacity to errors.Is.
type neverFits string

func (e neverFits) Error() string { return string(e) }

// Is reports whether target is algorithms.ErrCostExceedsCapacity.
func (e neverFits) Is(target error) bool { return target == algorithms.ErrCostExceedsCapacity }

// named returns the downstream called name.
func (c *Config) named(name string) (queue.Downstream, error) {
	if d, ok := c.Downstreams[name]; ok {
		return d, nil
	}
	return queue.Downstream{}, fmt.Errorf("%w %.64q: the policy file has no such downstream", ErrUnknownDownstream, name)
}

// ResolveHTTP returns the downstream of a built-in HTTP job that calls
// rawURL: the downstream the job names, which must be the one whose
// base_url covers rawURL for the job's tenant (DownstreamForTenant: a
// base_url with {tenant} covers only the job's own tenant's host or
// path).
func (c *Config) ResolveHTTP(job *queue.Job, rawURL string) (queue.Downstream, error) {
	if job.Downstream == "" {
		return queue.Downstream{}, fmt.Errorf("a %s job must name its downstream", httpjob.Type)
	}
	d, err := c.named(job.Downstream)
	if err != nil {
		return queue.Downstream{}, err
	}
	got, err := c.DownstreamForTenant(job.Tenant, rawURL)
	if err != nil {
		return queue.Downstream{}, err
	}
	if got.Name != d.Name {
		return queue.Downstream{}, fmt.Errorf("%w: the url belongs to downstream %q, not %q", ErrURLNotAllowed, got.Name, d.Name)
	}
	return d, nil
}

// checkType refuses a job type that queue.types, when the file has it,
// does not list; the error names the known types (the first
// maxTypesShown, in the file's order).
func (c *Config) checkType(t string) error {
	known := c.Queue.Types
	switch {
	case known == nil || t == httpjob.Type:
		return nil
	case c.types != nil && c.types[t]:
		return nil
	case c.types == nil && slices.Contains(known, t): // a Config not made by Parse
		return nil
	}
	shown := strings.Join(known[:min(len(known), maxTypesShown)], ", ")
	if len(known) > maxTypesShown {
		shown += fmt.Sprintf(" and %d more", len(known)-maxTypesShown)
	}
	return fmt.Errorf("%w %.64q: no worker of queue %q handles it (the policy's queue.types); known types: %s",
		ErrUnknownType, t, c.Queue.Name, shown)
}

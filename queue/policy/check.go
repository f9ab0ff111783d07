package policy

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/throttle"
)

// ErrUnknownDownstream is wrapped by CheckJob's and ResolveHTTP's error
// for a job that names a downstream the policy file does not have.
var ErrUnknownDownstream = errors.New("sluice: unknown downstream")

// CheckJob refuses a job that the workers of this policy could never run,
// so that the producer says so at enqueue instead of a worker archiving
// the job later (queue.Config.Check; QueueConfig sets it):
//
//   - a downstream the file does not name;
//   - a cost above its downstream's burst, or above the burst of one of
//     its also rates that counts the cost, which no slot can ever hold;
//   - a built-in HTTP job without a url, or whose url no downstream's
//     base_url covers, or that belongs to another downstream than the one
//     it names;
//   - a built-in HTTP job that net/http could never send: a method other
//     than GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS, a header name
//     that is not a token, a header value with CR, LF, NUL or another
//     control character but tab (downstream.CheckRequest). The error
//     names neither the header nor its value.
//
// The tenant's own capacity is checked by the producer itself.
func (c *Config) CheckJob(job *queue.Job) error {
	if job.Type == httpjob.Type {
		req, err := httpjob.ParseRequest(job.Payload)
		if err != nil {
			return fmt.Errorf("%s job: %w", httpjob.Type, err)
		}
		if _, err := c.ResolveHTTP(job, req.URL); err != nil {
			return err
		}
	}
	if job.Downstream == "" {
		return nil
	}
	d, ok := c.Downstreams[job.Downstream]
	if !ok {
		return fmt.Errorf("%w %.64q: the policy file has no such downstream", ErrUnknownDownstream, job.Downstream)
	}
	cost := max(job.Cost, 1)
	if burst := max(d.Limit.Burst, 1); cost > burst {
		return fmt.Errorf("cost %d exceeds downstream %q's burst of %d, so no slot could ever hold it: %w",
			cost, d.Name, burst, algorithms.ErrCostExceedsCapacity)
	}
	for i, r := range d.Limit.Also {
		if burst := max(r.Burst, 1); r.Counts == throttle.CountsCost && cost > burst {
			return fmt.Errorf("cost %d exceeds the burst of %d of downstream %q's also[%d] (%v), so no slot could ever hold it: %w",
				cost, burst, d.Name, i, r, algorithms.ErrCostExceedsCapacity)
		}
	}
	return nil
}

// ResolveHTTP returns the downstream of a built-in HTTP job that calls
// rawURL: the downstream the job names, which must be the one whose
// base_url covers rawURL (DownstreamFor).
func (c *Config) ResolveHTTP(job *queue.Job, rawURL string) (queue.Downstream, error) {
	if job.Downstream == "" {
		return queue.Downstream{}, fmt.Errorf("a %s job must name its downstream", httpjob.Type)
	}
	d, ok := c.Downstreams[job.Downstream]
	if !ok {
		return queue.Downstream{}, fmt.Errorf("%w %.64q: the policy file has no such downstream", ErrUnknownDownstream, job.Downstream)
	}
	got, err := c.DownstreamFor(rawURL)
	if err != nil {
		return queue.Downstream{}, err
	}
	if got.Name != d.Name {
		return queue.Downstream{}, fmt.Errorf("%w: the url belongs to downstream %q, not %q", ErrURLNotAllowed, got.Name, d.Name)
	}
	return d, nil
}

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
var ErrUnknownDownstream = errors.New("unknown downstream")

// CheckJob refuses a job that the workers of this policy could never run,
// so that the producer says so at enqueue instead of a worker archiving
// the job later (queue.Config.Check; QueueConfig sets it): one naming a
// downstream the file does not have, or whose cost is above the burst of
// its downstream or of an also rate that counts the cost; a built-in HTTP
// job whose request httpjob.ParseRequest refuses or whose url ResolveHTTP
// refuses. The tenant's own capacity is checked by the producer itself.
func (c *Config) CheckJob(job *queue.Job) error {
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

// named returns the downstream called name.
func (c *Config) named(name string) (queue.Downstream, error) {
	if d, ok := c.Downstreams[name]; ok {
		return d, nil
	}
	return queue.Downstream{}, fmt.Errorf("%w %.64q: the policy file has no such downstream", ErrUnknownDownstream, name)
}

// ResolveHTTP returns the downstream of a built-in HTTP job that calls
// rawURL: the downstream the job names, which must be the one whose
// base_url covers rawURL (DownstreamFor).
func (c *Config) ResolveHTTP(job *queue.Job, rawURL string) (queue.Downstream, error) {
	if job.Downstream == "" {
		return queue.Downstream{}, fmt.Errorf("a %s job must name its downstream", httpjob.Type)
	}
	d, err := c.named(job.Downstream)
	if err != nil {
		return queue.Downstream{}, err
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

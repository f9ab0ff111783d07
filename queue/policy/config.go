package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/queue"
)

// Defaults applied to fields that a policy file leaves out.
const (
	// DefaultQueueName is queue.name's default.
	DefaultQueueName = "default"
	// DefaultPrefetch is queue.prefetch's default.
	DefaultPrefetch = 64
	// DefaultMaxPayload is queue.max_payload's default: 1 MiB.
	DefaultMaxPayload = 1 << 20
	// DefaultRetention is queue.retention's default: completed jobs are
	// not kept, as asynq's own default.
	DefaultRetention = 0
	// DefaultPer is a downstream's default per.
	DefaultPer = time.Second
	// DefaultBurst is a downstream's default burst: calls evenly spaced.
	DefaultBurst = 1
	// DefaultMaxWait is a downstream's default max_wait.
	DefaultMaxWait = 10 * time.Second
	// DefaultLease is a downstream's default lease.
	DefaultLease = 30 * time.Second
	// DefaultTimeout is a downstream's default timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultWeight is a tenant's default weight.
	DefaultWeight = 1
	// DefaultTenant is the tenants key that applies to tenants not listed.
	DefaultTenant = "default"
)

// Limits on the values of a policy file. Values beyond them are errors:
// they are typos (an extra zero), not configurations.
const (
	// MaxFileSize is the largest policy file accepted, in bytes.
	MaxFileSize = 16 << 20
	// MaxNameLen is the longest queue or downstream name, in bytes.
	MaxNameLen = names.MaxLen
	// MaxTenantIDLen is the longest tenant id, in bytes; the same as
	// queue.MaxTenantLen.
	MaxTenantIDLen = 1024
	// MaxBound is the largest queue.bound and queue.tenant_bound.
	MaxBound = int64(1) << 40
	// MaxPrefetch is the largest queue.prefetch.
	MaxPrefetch = 1_000_000
	// MaxPayloadLimit is the largest queue.max_payload: 64 MiB.
	MaxPayloadLimit = 64 << 20
	// MinRetention is the shortest queue.retention: 0, completed jobs
	// deleted at once (asynq's default).
	MinRetention = 0
	// MaxRetention is the longest queue.retention: 30 days.
	MaxRetention = 30 * 24 * time.Hour
	// MaxConcurrency is the largest downstream concurrency.
	MaxConcurrency = 1_000_000
	// MaxDuration bounds max_wait, lease and timeout.
	MaxDuration = 24 * time.Hour
	// MaxWeight is the largest tenant weight.
	MaxWeight = 100
)

// Config is a parsed and validated policy file. Every default is filled
// in: a Config from Parse or Load needs no further checking.
type Config struct {
	// Queue is the queue section.
	Queue Queue
	// Downstreams are the downstream APIs by name; never nil.
	Downstreams map[string]queue.Downstream
	// Tenants are the tenants' policies by id, including DefaultTenant
	// when the file has it; never nil.
	Tenants map[string]Tenant
}

// Queue is the queue section: the waiting room's name and bounds.
type Queue struct {
	// Name is the asynq queue's name: 1 to 64 bytes of [A-Za-z0-9_.-].
	Name string
	// Bound is the most jobs waiting (enqueued, not yet started). At
	// least 1.
	Bound int64
	// TenantBound is the most jobs waiting per tenant; 0 for no
	// per-tenant bound. At most Bound.
	TenantBound int64
	// Prefetch is the most jobs handed to asynq but not started,
	// fleet-wide.
	Prefetch int
	// MaxPayload is the largest job payload, in bytes.
	MaxPayload int64
	// Retention is how long asynq keeps a completed job, for asynqmon
	// (the queue.ServerConfig.Retention of every worker); 0: not kept.
	Retention time.Duration
}

// Tenant is one entry of the tenants section.
type Tenant struct {
	// ID is the entry's key: the tenant's id, or DefaultTenant.
	ID string
	// Policy is the tenant's admission policy, valid by
	// algorithms.Policy.Validate; nil when the entry has none (every job
	// is admitted).
	Policy *algorithms.Policy
	// Weight is the tenant's share of the fair drain, 1 to MaxWeight.
	Weight int
	// Class labels the tenant's metrics (backlog, wait, throttled time):
	// tenants are never metric labels themselves, their number being
	// unbounded. Empty means "default".
	Class string
}

// Parse reads a policy file's contents. On failure it returns an
// ErrorList, whose entries name the line, column and field of each
// problem.
func Parse(data []byte) (*Config, error) {
	return parse(data, "")
}

// Load reads and parses the policy file at path. Every error it returns
// starts with path; parse errors are an ErrorList, and a file that cannot
// be read gives an *Error that wraps the *fs.PathError.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	var data []byte
	if err == nil {
		defer f.Close()
		data, err = io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	}
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Op + ": " + pe.Err.Error()
		}
		return nil, ErrorList{{File: path, Msg: msg, Err: err}}
	}
	return parse(data, path)
}

func parse(data []byte, file string) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, ErrorList{{Msg: fmt.Sprintf("the file is larger than %d bytes", MaxFileSize)}}.finish(file)
	}
	cfg, errs, _ := decode(data, max(nodeBudget, 2*len(data)))
	if len(errs) > 0 {
		return nil, errs.finish(file)
	}
	return cfg, nil
}

// TenantPolicy returns the entry for tenant id, or else the DefaultTenant
// entry (whose ID is DefaultTenant), or else false: the tenant has no
// entry, so no admission policy and DefaultWeight.
func (c *Config) TenantPolicy(id string) (Tenant, bool) {
	if t, ok := c.Tenants[id]; ok {
		return t, true
	}
	t, ok := c.Tenants[DefaultTenant]
	return t, ok
}

// QueueConfig returns the queue's settings for queue.NewProducer and
// queue.NewServer: its name and bounds, each tenant's admission policy,
// weight and class from the tenants section, and CheckJob, so that a job
// these workers could never run is refused at enqueue.
func (c *Config) QueueConfig() queue.Config {
	return queue.Config{
		Queue:       c.Queue.Name,
		Bound:       c.Queue.Bound,
		TenantBound: c.Queue.TenantBound,
		MaxPayload:  int(c.Queue.MaxPayload),
		Check:       c.CheckJob,
		Tenants: func(id string) queue.TenantPolicy {
			t, ok := c.TenantPolicy(id)
			if !ok {
				return queue.TenantPolicy{}
			}
			return queue.TenantPolicy{Admission: t.Policy, Weight: t.Weight, Class: t.Class}
		},
	}
}

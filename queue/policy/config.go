package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
)

// DefaultTenant is the tenants key that applies to tenants not listed.
const DefaultTenant = "default"

// Limits on the values of a policy file that more than one check uses (the
// others, and the defaults, are in docs/policy.md). Values beyond them are
// errors: they are typos (an extra zero), not configurations.
const (
	// MaxFileSize is the largest policy file accepted, in bytes.
	MaxFileSize = 16 << 20
	// MaxBound is the largest queue.bound and queue.tenant_bound.
	MaxBound = int64(1) << 40
	// MaxDuration bounds max_wait, lease and timeout.
	MaxDuration = 24 * time.Hour
	// MaxTypes is the most job types queue.types may list.
	MaxTypes = 1000
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
	// Schedules are the periodic jobs, in the file's order; nil when the
	// file has none.
	Schedules []Schedule

	// Made by Parse from Queue.Types and Downstreams, which must not be
	// changed after it (a Config made otherwise has none: the methods
	// then work from Queue.Types and Downstreams as they are).
	types map[string]bool
	index *baseIndex
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
	// Shards is how many shards the waiting room spreads over
	// (queue.Config.Shards); default 1.
	Shards int
	// Prefetch is the most jobs handed to asynq but not started,
	// fleet-wide.
	Prefetch int
	// MaxPayload is the largest job payload, in bytes.
	MaxPayload int64
	// Retention is how long asynq keeps a completed job, for asynqmon
	// (the queue.ServerConfig.Retention of every worker); 0: not kept.
	Retention time.Duration
	// Replicas and ReplicaTimeout are queue.Config's: under Replicas
	// above 0, enqueue succeeds only once that many replicas have the
	// job (WAIT).
	Replicas       int
	ReplicaTimeout time.Duration
	// Types are the job types that the queue's workers handle, the
	// built-in httpjob.Type always among them; CheckJob refuses any
	// other (ErrUnknownType). Nil, when the file has no queue.types:
	// every type is accepted.
	Types []string
}

// Tenant is one entry of the tenants section.
type Tenant struct {
	// ID is the entry's key: the tenant's id, or DefaultTenant.
	ID string
	// Policy is the tenant's admission policy, valid by
	// algorithms.Policy.Validate; nil when the entry has none (every job
	// is admitted).
	Policy *algorithms.Policy
	// Weight is the tenant's share of the fair drain, 1 to 100.
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
	cfg, errs := decode(data)
	if len(errs) > 0 {
		return nil, errs.finish(file)
	}
	return cfg, nil
}

// TenantPolicy returns the entry for tenant id, or else the DefaultTenant
// entry (whose ID is DefaultTenant), or else false: the tenant has no
// entry, so no admission policy and weight 1.
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
		Shards:      c.Queue.Shards,
		MaxPayload:  int(c.Queue.MaxPayload),
		Replicas:    c.Queue.Replicas,
		// The default (1s) where the file has none.
		ReplicaTimeout: c.Queue.ReplicaTimeout,
		Check:          c.CheckJob,
		Tenants: func(id string) queue.TenantPolicy {
			t, _ := c.TenantPolicy(id) // the zero Tenant, for none: queue's defaults
			return queue.TenantPolicy{Admission: t.Policy, Weight: t.Weight, Class: t.Class}
		},
	}
}

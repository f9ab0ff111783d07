package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/internal/names"
	"github.com/sluicehq/sluice/queue"
)

// WithTypes returns the policy with types added to the job types its
// queue's workers handle, for a worker program that registers handlers
// of its own (queue/worker's Handle). A policy whose file lists no
// queue.types accepts every type already: it is returned as it is.
// Otherwise the result is a copy, c unchanged, whose CheckJob also
// accepts types; a type already listed is not listed twice. An invalid
// type name (1 to queue.MaxTypeLen bytes of A-Z, a-z, 0-9, _, ., :, /
// and -) is an error.
func (c *Config) WithTypes(types ...string) (*Config, error) {
	for _, t := range types {
		if !names.Valid(t, queue.MaxTypeLen, ":/") {
			return nil, fmt.Errorf("job type %.64q: use 1 to %d bytes of letters, digits and _.:-/", t, queue.MaxTypeLen)
		}
	}
	if c.Queue.Types == nil {
		return c, nil
	}
	known := c.types
	if known == nil { // a Config not made by Parse
		known = map[string]bool{}
		for _, t := range c.Queue.Types {
			known[t] = true
		}
	}
	out := *c
	out.types = maps.Clone(known)
	out.Queue.Types = slices.Clone(c.Queue.Types)
	for _, t := range types {
		if !out.types[t] {
			out.types[t] = true
			out.Queue.Types = append(out.Queue.Types, t)
		}
	}
	return &out, nil
}

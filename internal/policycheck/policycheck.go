// Package policycheck is the -check of the worker and enqueue commands:
// it reads and validates a policy file without Redis and prints every
// problem with its place, for a CI step or a hand about to reload.
package policycheck

import (
	"errors"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/queue/policy"
)

// Exit codes of Run.
const (
	ExitOK      = 0 // the file is valid
	ExitInvalid = 2 // the file has problems, or cannot be read
)

// Run checks the policy file at path as the commands would load it
// (policy.Load) and returns the exit code. A valid file gets one line on
// stdout naming what it holds; an invalid one gets every problem on
// stderr, one a line as file:line:column: field: message, and a last
// line counting them (at most policy.MaxErrors, then how many more).
// It touches nothing but the file.
func Run(path string, stdout, stderr io.Writer) int {
	if path == "" {
		fmt.Fprintln(stderr, "-check needs -policy (or SLUICE_POLICY): the file to check")
		return ExitInvalid
	}
	cfg, err := policy.Load(path)
	if err != nil {
		var list policy.ErrorList
		if !errors.As(err, &list) {
			fmt.Fprintln(stderr, err)
			return ExitInvalid
		}
		for _, e := range list {
			fmt.Fprintln(stderr, e)
		}
		if n := len(list); n <= policy.MaxErrors { // else its last entry counts those left out
			fmt.Fprintf(stderr, "%s: %d %s\n", path, n, plural(n, "problem", "problems"))
		}
		return ExitInvalid
	}
	fmt.Fprintf(stdout, "%s: ok: queue %q, %d %s, %d %s, %d %s\n", path, cfg.Queue.Name,
		len(cfg.Downstreams), plural(len(cfg.Downstreams), "downstream", "downstreams"),
		len(cfg.Tenants), plural(len(cfg.Tenants), "tenant policy", "tenant policies"),
		len(cfg.Schedules), plural(len(cfg.Schedules), "schedule", "schedules"))
	return ExitOK
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

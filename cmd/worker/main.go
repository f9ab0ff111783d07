// Command worker runs sluice's workers: it drains the bounded queue
// through the shared throttle, serves the sluice page, POST /enqueue,
// /metrics and /healthz, and with -demo shows the whole system on one
// machine. It is package queue/worker behind flags; a Go program with job
// types of its own runs that package itself.
//
//	go run ./cmd/worker -demo
//	go run ./cmd/worker -policy policy.yaml -redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"os"

	"github.com/sluicehq/sluice/internal/workercmd"
)

func main() {
	os.Exit(workercmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

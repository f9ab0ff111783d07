// Command worker runs sluice's workers: it drains the bounded queue
// through the shared throttle, serves POST /enqueue, /metrics and /healthz,
// and with -demo shows the whole system on one machine.
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

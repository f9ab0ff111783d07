// Command enqueue puts jobs into a sluice queue: one from flags, or many
// from JSON lines; "enqueue stats" shows the queue. Its exit code tells a
// script why a job was refused (see internal/enqueuecmd).
//
//	enqueue -policy policy.yaml -redis redis://127.0.0.1:6379/0 -tenant acme -type report
//	enqueue -policy policy.yaml -redis redis://127.0.0.1:6379/0 -f jobs.jsonl
package main

import (
	"context"
	"os"

	"github.com/sluicehq/sluice/internal/enqueuecmd"
)

func main() {
	os.Exit(enqueuecmd.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

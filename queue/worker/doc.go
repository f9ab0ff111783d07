// Package worker runs a sluice worker inside a Go program: everything the
// worker command (cmd/worker) runs, with the program's own job handlers
// added. A Worker runs the queue's workers and its fair dispatcher, the
// shared throttle before each job, the built-in sluice.http job
// (queue/httpjob), and the HTTP endpoints: the sluice page at /,
// POST /enqueue, /metrics, /healthz and asynqmon at /monitoring/. It
// checks its Redis at start (a Redis that may evict keys is refused) and
// while it runs (data lost, memory used), and stops gracefully when the
// context given to Run ends.
//
// New takes a Config (the policy, the Redis, the listen address; every
// default documented), Handle adds a handler for a job type of the
// program's own, and Run serves until its context ends. NewFlags gives a
// program the worker command's flags and environment variables;
// cmd/worker is NewFlags, New and Run.
//
// A handler returns nil when its job is done, an error to have it
// retried with asynq's backoff (spending one of its retries), or
// queue.Permanent(err) to have it archived now. A handler says "not now"
// without spending a retry in one of three ways:
//
//   - queue.Reschedule(d, reason): the job goes back to the head of its
//     tenant's list for d, the tenant asleep until then;
//   - queue.Refused(d, reason): the same, for a call that the job's
//     downstream refused for its rate (a 429 or a 503), counted: a job
//     refused the downstream's max_refusals times is archived;
//   - a *throttle.TooFarError or *throttle.BusyError (wrapped or not)
//     from the handler's own throttle.Wait or Acquire: the job goes back
//     for the error's RetryAfter (at most a second for a held lease), as
//     when the worker's own slot before the job is too far away or every
//     lease is held.
//
// Example shows a program with a handler of its own.
package worker

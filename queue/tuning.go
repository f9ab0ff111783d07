package queue

import "time"

// The queue's timing and sizing constants, in one place. The figures
// that chose them were measured on one 2-core machine shared with the
// benchmark's other processes (bench/README.md has the commands); each
// says what it trades.
const (
	// claimBatch is the most jobs one claim hands over: larger batches
	// cost Redis less a job (BenchmarkClaimScript), and hold the claim's
	// script longer.
	claimBatch = 64

	// idHold is how long a recorded id stays held at most once its job
	// is handed over: its worker ends the hold when the job starts or
	// goes back to the waiting room, well within it; a job that never
	// reaches a worker (deleted or archived in asynqmon, its worker dead)
	// frees its id after it (docs/queue.md, Job ids).
	idHold = 30 * time.Second

	// wakeSlack is how long after the next sleeping tenant's wake time
	// the dispatcher claims, so that one claim serves the tenants that
	// wake close together rather than one claim each.
	wakeSlack = 10 * time.Millisecond

	// fullRecheckPolls is how many PollIntervals a dispatcher that found
	// the prefetch full waits for a worker's wake before it looks again
	// (docs/queue.md, The dispatcher).
	fullRecheckPolls = 4

	// handOverHorizon is the furthest slot a worker books for a job of
	// the queue (when its downstream's max_wait allows that long): a job
	// whose slot is further away goes back to the waiting room, so that
	// no worker sleeps long for a slot while other tenants' jobs wait.
	handOverHorizon = time.Second

	// leaseRecheck is the longest a tenant sleeps when its job found
	// every concurrency lease held; a release heard wakes it sooner.
	leaseRecheck = time.Second

	// takerShare and maxTakers: a Server runs one asynq server for every
	// takerShare goroutines, at most maxTakers. asynq's processor takes
	// its tasks one at a time, one Redis round trip each, so one server
	// caps a process at one task a round trip whatever its concurrency:
	// in the scale benchmark (bench/cmd/scale, nolimit10k: 4 processes ×
	// 32) a server a process delivered 5,300-5,400 jobs a second and four
	// a process 6,800-8,500 (docs/queue.md, Hand-over).
	takerShare, maxTakers = 8, 8

	// claimRetryStep and claimRetryMax: a dispatcher whose claim failed
	// (Redis unreachable) waits one more step for each failure in a row,
	// up to the max.
	claimRetryStep, claimRetryMax = 100 * time.Millisecond, 2 * time.Second

	// publishEvery is how often a dispatcher adds its asynq queue to
	// asynq's set of queues, which asynqmon and the Inspector list.
	publishEvery = 10 * time.Second

	// backlogSampleEvery is how often a Server with Metrics refreshes its
	// backlog gauge (one small pipeline).
	backlogSampleEvery = 10 * time.Second
)

// handingStale is how old an entry taken for the hand-over and not
// cleared may grow before a claim takes it again (queue_claim.lua): its
// dispatcher died between taking it and writing its asynq task, or could
// not write it. Long enough that a live dispatcher has written it (its
// round trips take milliseconds), short enough that a killed worker's
// batch runs within seconds.
const handingStale = 15 * time.Second

// Package scripts holds every Lua script sluice runs on Redis, one file per
// script, each headed by a comment listing its KEYS, ARGV and return value.
// Callers run them with (*redis.Script).Run, which sends EVALSHA and falls
// back to EVAL when the server does not have the script yet.
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed prelude.lua
	preludeSrc string
	//go:embed admit_main.lua
	admitMainSrc string
	//go:embed fixed_window.lua
	fixedWindowSrc string
	//go:embed sliding_window_log.lua
	slidingWindowLogSrc string
	//go:embed sliding_window_counter.lua
	slidingWindowCounterSrc string
	//go:embed token_bucket.lua
	tokenBucketSrc string
	//go:embed gcra.lua
	gcraSrc string
)

// The admission scripts of package algorithms: prelude.lua, the
// algorithm's admit(), and admit_main.lua, which documents their KEYS, ARGV
// and reply.
var (
	FixedWindow          = redis.NewScript(preludeSrc + fixedWindowSrc + admitMainSrc)
	SlidingWindowLog     = redis.NewScript(preludeSrc + slidingWindowLogSrc + admitMainSrc)
	SlidingWindowCounter = redis.NewScript(preludeSrc + slidingWindowCounterSrc + admitMainSrc)
	TokenBucket          = redis.NewScript(preludeSrc + tokenBucketSrc + admitMainSrc)
	GCRA                 = redis.NewScript(preludeSrc + gcraSrc + admitMainSrc)
)

// AdmitFunctions maps each algorithm's policy name to the Lua source that
// defines its admit() function, for scripts that admit and do more in the
// same atomic step (the queue's enqueue). Callers pass admit() the five
// policy constants (limit, period, capacity, rl, pr) as the strings of
// their ARGV, and each algorithm converts only the two or three it uses:
// a tonumber of such a constant costs redis-server about 1,800
// instructions.
var AdmitFunctions = map[string]string{
	"fixed_window":           fixedWindowSrc,
	"sliding_window_log":     slidingWindowLogSrc,
	"sliding_window_counter": slidingWindowCounterSrc,
	"token_bucket":           tokenBucketSrc,
	"gcra":                   gcraSrc,
}

// Prelude is the source of the helpers (int, ttl, clock) that admit()
// functions use; composed scripts start with it.
var Prelude = preludeSrc

var (
	//go:embed throttle_reserve.lua
	throttleReserveSrc string
	//go:embed throttle_cancel.lua
	throttleCancelSrc string
	//go:embed throttle_pause.lua
	throttlePauseSrc string
	//go:embed throttle_release.lua
	throttleReleaseSrc string
	//go:embed throttle_acquire.lua
	throttleAcquireSrc string
)

// The pacing scripts of package throttle.
var (
	ThrottleReserve = redis.NewScript(preludeSrc + throttleReserveSrc)
	ThrottleCancel  = redis.NewScript(preludeSrc + throttleCancelSrc)
	ThrottlePause   = redis.NewScript(preludeSrc + throttlePauseSrc)
	ThrottleAcquire = redis.NewScript(preludeSrc + throttleAcquireSrc)
	ThrottleRelease = redis.NewScript(throttleReleaseSrc)
)

var (
	//go:embed no_admission.lua
	noAdmissionSrc string
	//go:embed queue_enqueue.lua
	queueEnqueueSrc string
	//go:embed queue_claim.lua
	queueClaimSrc string
	//go:embed queue_take.lua
	queueTakeSrc string
	//go:embed queue_untake.lua
	queueUntakeSrc string
	//go:embed queue_sleep.lua
	queueSleepSrc string
	//go:embed queue_handover.lua
	queueHandoverSrc string
)

// QueueEnqueue returns the enqueue script that admits by algorithm alg (a
// policy name as in AdmitFunctions), or admits everything when alg is "".
// Scripts are built once per algorithm.
func QueueEnqueue(alg string) *redis.Script {
	return queueEnqueue[alg]
}

var queueEnqueue = func() map[string]*redis.Script {
	m := map[string]*redis.Script{"": redis.NewScript(preludeSrc + noAdmissionSrc + queueEnqueueSrc)}
	for name, fn := range AdmitFunctions {
		m[name] = redis.NewScript(preludeSrc + fn + queueEnqueueSrc)
	}
	return m
}()

// The waiting room's scripts of package queue.
var (
	QueueClaim  = redis.NewScript(preludeSrc + queueHandoverSrc + queueClaimSrc)
	QueueTake   = redis.NewScript(preludeSrc + queueHandoverSrc + queueTakeSrc)
	QueueUntake = redis.NewScript(preludeSrc + queueUntakeSrc)
	QueueSleep  = redis.NewScript(preludeSrc + queueSleepSrc)
)

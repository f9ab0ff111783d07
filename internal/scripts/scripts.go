// Package scripts holds every Lua script sluice runs on Redis, one file per
// script, each headed by a comment listing its KEYS, ARGV and return value.
// Callers run them with (*redis.Script).Run, which sends EVALSHA and falls
// back to EVAL when the server does not have the script yet.
package scripts

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// src returns the sources of the named files (without ".lua"), joined.
func src(names ...string) string {
	var s string
	for _, name := range names {
		b, err := files.ReadFile(name + ".lua")
		if err != nil {
			panic(err) // a name this file misspells: every test fails
		}
		s += string(b)
	}
	return s
}

// script returns the script made of the named files, prelude.lua first.
func script(names ...string) *redis.Script {
	return redis.NewScript(src(append([]string{"prelude"}, names...)...))
}

// Admit maps each algorithm's policy name (such as "gcra") to its
// admission script of package algorithms: prelude.lua, the algorithm's
// admit(), and admit_main.lua, which documents their KEYS, ARGV and reply.
var Admit = map[string]*redis.Script{}

// The pacing scripts of package throttle.
var (
	ThrottleReserve = script("throttle_book", "throttle_reserve")
	ThrottleCancel  = script("throttle_cancel")
	ThrottleSettle  = script("throttle_settle")
	ThrottlePause   = script("throttle_pause")
	ThrottleAcquire = script("throttle_acquire")
	ThrottleRelease = redis.NewScript(src("throttle_release"))
	ThrottleCircuit = script("throttle_circuit")
)

// QueueEnqueue returns the enqueue script that admits by algorithm alg (its
// policy name, such as "gcra"), or admits everything when alg is "".
// Scripts are built once per algorithm.
func QueueEnqueue(alg string) *redis.Script {
	return queueEnqueue[alg]
}

var queueEnqueue = map[string]*redis.Script{"": script("no_admission", "queue_enqueue")}

func init() {
	for _, alg := range []string{"fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"} {
		Admit[alg] = script(alg, "admit_main")
		queueEnqueue[alg] = script(alg, "queue_enqueue")
	}
}

// The waiting room's scripts of package queue.
var (
	QueueClaim  = script("queue_handover", "queue_claim")
	QueueTake   = script("queue_handover", "queue_take")
	QueueHanded = redis.NewScript(src("queue_handed"))
	QueueUntake = script("queue_untake")
	// A worker's heartbeat and the recovery of a dead one's jobs.
	QueueAlive     = script("queue_alive")
	QueueRecover   = script("queue_recover")
	QueueRecovered = script("queue_recovered")
)

package main

import (
	"time"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
)

// scriptCommands are the commands that run a script: one client round
// trip each.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// serverDelta is what the server did between two snapshots, less the
// benchmark's own INFO and PING.
type serverDelta struct {
	from, to time.Time
	commands int64 // all commands, those inside scripts included
	scripts  int64 // script invocations
	cpu      time.Duration
}

func delta(a, b redisinfo.Snapshot) serverDelta {
	d := b.Sub(a) // already without the INFO that read a
	return serverDelta{
		from:     a.At,
		to:       b.At,
		commands: d.Processed - d.Calls("info", "ping"),
		scripts:  d.Calls(scriptCommands...),
		cpu:      time.Duration(d.CPU * float64(time.Second)),
	}
}

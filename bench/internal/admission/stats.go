package admission

import (
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/bench/internal/redisinfo"
)

// scriptUsec is the time the server spent inside scripts (EVAL and
// EVALSHA, including the commands they ran) per script call, in
// microseconds, over the difference s of two snapshots.
func scriptUsec(s redisinfo.Snapshot) float64 {
	calls := scriptCalls(s)
	if calls == 0 {
		return 0
	}
	usec := s.Commands["eval"].Usec + s.Commands["evalsha"].Usec
	return float64(usec) / float64(calls)
}

// scriptCalls is the number of EVAL and EVALSHA calls in s.
func scriptCalls(s redisinfo.Snapshot) int64 { return s.Calls("eval", "evalsha") }

// innerCommands lists the commands other than EVAL, EVALSHA and INFO that
// ran, per script call: what the scripts did on average, e.g. "hmget 1,
// hset 1, pexpire 1, time 1".
func innerCommands(s redisinfo.Snapshot) string {
	calls := scriptCalls(s)
	if calls == 0 {
		return ""
	}
	var parts []string
	for name, c := range s.Commands {
		switch name {
		case "eval", "evalsha", "info", "config|resetstat", "script|load":
			continue
		}
		per := float64(c.Calls) / float64(calls)
		if per < 0.005 {
			continue
		}
		f := strings.TrimRight(strconv.FormatFloat(per, 'f', 2, 64), "0")
		parts = append(parts, name+" "+strings.TrimSuffix(f, "."))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

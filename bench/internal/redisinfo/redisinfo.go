// Package redisinfo reads the counters of a redis-server that the
// benchmark commands report: the commands it processed, its CPU time, and
// the calls and time of each command (INFO commandstats). Take a Snapshot
// before and after a run; their difference (Sub) is what the run cost.
package redisinfo

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Snapshot is one reading of a server's counters, or the difference of
// two (Sub).
type Snapshot struct {
	// At is when the reply arrived; zero from Parse.
	At time.Time
	// Version is the server's redis_version.
	Version string
	// Processed is total_commands_processed: every command, those run by
	// scripts included.
	Processed int64
	// CPU is the server process's used_cpu_user plus used_cpu_sys, in
	// seconds.
	CPU float64
	// Commands maps a command's name, as commandstats spells it ("evalsha",
	// "config|resetstat"), to its counters. Commands run by a script are
	// counted under their own names as well as inside the script's time.
	Commands map[string]CommandStat
}

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  int64 // time spent in the command, in microseconds
}

// Read takes a snapshot of the server: INFO server, stats, cpu and
// commandstats in one command. That INFO is itself counted in the next
// snapshot; Sub leaves it out.
func Read(ctx context.Context, c redis.UniversalClient) (Snapshot, error) {
	info, err := c.Info(ctx, "server", "stats", "cpu", "commandstats").Result()
	if err != nil {
		return Snapshot{}, err
	}
	s := Parse(info)
	if s.Version == "" {
		return Snapshot{}, errors.New("redisinfo: INFO has no redis_version")
	}
	s.At = time.Now()
	return s, nil
}

// Parse reads the fields of Snapshot from an INFO reply; the fields it
// lacks stay zero.
func Parse(info string) Snapshot {
	s := Snapshot{Commands: map[string]CommandStat{}}
	for line := range strings.Lines(info) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "redis_version":
			s.Version = val
		case "total_commands_processed":
			s.Processed, _ = strconv.ParseInt(val, 10, 64)
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(val, 64)
			s.CPU += f
		default:
			if cmd, ok := strings.CutPrefix(name, "cmdstat_"); ok {
				s.Commands[cmd] = parseCommandStat(val)
			}
		}
	}
	return s
}

// parseCommandStat reads "calls=10,usec=80,usec_per_call=8.00,...".
func parseCommandStat(val string) CommandStat {
	var c CommandStat
	for f := range strings.SplitSeq(val, ",") {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "calls":
			c.Calls, _ = strconv.ParseInt(v, 10, 64)
		case "usec":
			c.Usec, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return c
}

// Sub returns what the server did from before to s: the counters of s
// less those of before, with At and Version of s, and in Commands only the
// commands whose calls changed. When s counts one INFO more than before,
// as it does when Read took both, that INFO (the one that read before) is
// left out of Processed and of the info calls.
func (s Snapshot) Sub(before Snapshot) Snapshot {
	d := Snapshot{
		At:        s.At,
		Version:   s.Version,
		Processed: s.Processed - before.Processed,
		CPU:       s.CPU - before.CPU,
		Commands:  map[string]CommandStat{},
	}
	for name, c := range s.Commands {
		b := before.Commands[name]
		if c.Calls != b.Calls {
			d.Commands[name] = CommandStat{Calls: c.Calls - b.Calls, Usec: c.Usec - b.Usec}
		}
	}
	if info, ok := d.Commands["info"]; ok && info.Calls > 0 {
		d.Processed--
		if info.Calls--; info.Calls == 0 {
			delete(d.Commands, "info")
		} else {
			d.Commands["info"] = info
		}
	}
	return d
}

// Add returns the sum of two differences (from Sub): their Processed, CPU
// and Commands added up, with At and Version of o.
func (s Snapshot) Add(o Snapshot) Snapshot {
	sum := Snapshot{At: o.At, Version: o.Version, Processed: s.Processed + o.Processed, CPU: s.CPU + o.CPU,
		Commands: make(map[string]CommandStat, max(len(s.Commands), len(o.Commands)))}
	for name, c := range s.Commands {
		sum.Commands[name] = c
	}
	for name, c := range o.Commands {
		a := sum.Commands[name]
		sum.Commands[name] = CommandStat{Calls: a.Calls + c.Calls, Usec: a.Usec + c.Usec}
	}
	return sum
}

// Calls returns the calls of the named commands, added up.
func (s Snapshot) Calls(names ...string) int64 {
	var n int64
	for _, name := range names {
		n += s.Commands[name].Calls
	}
	return n
}

package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/scripts"
)

// sluiceScripts names sluice's queue scripts by SHA1, so that the counter
// and the MONITOR profile can tell them apart.
var sluiceScripts = func() map[string]string {
	m := map[string]string{
		scripts.QueueClaim.Hash():  "sluice queue_claim",
		scripts.QueueTake.Hash():   "sluice queue_take",
		scripts.QueueUntake.Hash(): "sluice queue_untake",
		feedScript.Hash():          "staged feeder",
	}
	m[scripts.QueueEnqueue("").Hash()] = "sluice queue_enqueue (no admission)"
	for _, alg := range algorithms.Algorithms {
		m[scripts.QueueEnqueue(string(alg)).Hash()] = "sluice queue_enqueue (" + string(alg) + ")"
	}
	return m
}()

// asynqScripts names asynq's scripts by the kinds of keys they touch
// (asynq's scripts are private; their keys say what they are).
var asynqScripts = map[string]string{
	"t:*,pending":                                      "asynq enqueue",
	"pending,paused,active,lease":                      "asynq dequeue",
	"active,lease,t:*,processed:*,processed":           "asynq done (task deleted)",
	"active,lease,completed,t:*,processed:*,processed": "asynq mark complete (Retention)",
	"active,lease,pending,t:*":                         "asynq requeue",
	"servers:*,workers:*":                              "asynq heartbeat (background)",
	"aggregation_sets":                                 "asynq reclaim aggregation sets (background)",
	"lease":                                            "asynq list expired leases (background)",
	"completed":                                        "asynq delete expired completed (background)",
}

// asynqKind reduces an asynq key to its kind: "asynq:{default}:t:abc" is
// "t:*", "asynq:{default}:pending" is "pending".
func asynqKind(key string) string {
	_, rest, ok := strings.Cut(key, "}:")
	if !ok { // asynq:servers:{host:pid:id}
		rest = strings.TrimPrefix(key, "asynq:")
	}
	if kind, _, more := strings.Cut(rest, ":"); more {
		return kind + ":*"
	}
	return rest
}

// scriptLabel names a script run by its SHA1 and its keys.
func scriptLabel(sha string, keys []string) string {
	if l, ok := sluiceScripts[sha]; ok {
		return l
	}
	if len(keys) > 0 && strings.HasPrefix(keys[0], "asynq:") {
		kinds := make([]string, len(keys))
		for i, k := range keys {
			kinds[i] = asynqKind(k)
		}
		sig := strings.Join(kinds, ",")
		if l, ok := asynqScripts[sig]; ok {
			return l
		}
		return "asynq script [" + sig + "]"
	}
	if len(sha) > 8 {
		sha = sha[:8]
	}
	return "script " + sha
}

// commandLabel names one command by what it runs: the script for EVAL and
// EVALSHA, else the command's name.
func commandLabel(args []string) string {
	if len(args) == 0 {
		return "?"
	}
	name := strings.ToLower(args[0])
	switch name {
	case "evalsha", "evalsha_ro", "eval", "eval_ro":
		if len(args) < 3 {
			return name
		}
		sha := args[1]
		if strings.HasPrefix(name, "eval_") || name == "eval" {
			h := sha1.Sum([]byte(args[1]))
			sha = hex.EncodeToString(h[:])
		}
		n, _ := strconv.Atoi(args[2])
		if n < 0 || 3+n > len(args) {
			n = 0
		}
		return scriptLabel(sha, args[3:3+n])
	}
	return strings.ToUpper(name)
}

func argStrings(cmd redis.Cmder) []string {
	a := cmd.Args()
	// Enough for the name, the script, the key count and a script's keys
	// (sluice's and asynq's scripts have at most 8).
	n := min(len(a), 12)
	out := make([]string, n)
	for i := 0; i < n; i++ {
		switch v := a[i].(type) {
		case string:
			out[i] = v
		case []byte:
			out[i] = string(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// outcome tells the productive calls of the polling scripts from the
// idle ones: sluice's claim (jobs taken, a job to check, nothing ready,
// or prefetch full) and
// asynq's dequeue (a task, or an empty queue, after which asynq's
// processor sleeps TaskCheckInterval/2 plus up to TaskCheckInterval).
// err is the command's error as the hook sees it (go-redis sets it on the
// command only after the hooks return).
func outcome(cmd redis.Cmder, err error) string {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return ""
	}
	if err != nil && err != redis.Nil {
		if strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return " → NOSCRIPT"
		}
		return " → error"
	}
	a := cmd.Args()
	if len(a) < 2 {
		return ""
	}
	sha, _ := a[1].(string)
	if name, _ := a[0].(string); strings.EqualFold(name, "eval") {
		h := sha1.Sum([]byte(sha))
		sha = hex.EncodeToString(h[:])
	}
	if sluiceScripts[sha] == "sluice queue_claim" {
		v, _ := c.Val().([]any)
		if len(v) == 0 {
			return ""
		}
		// The statuses of queue_claim.lua.
		switch st, _ := v[0].(int64); st {
		case 1:
			return " → a job to check (throttle)"
		case 2:
			return " → prefetch full (waits for jobs to leave asynq's pending list)"
		case 3:
			return " → jobs handed over"
		default:
			return " → nothing ready (sleeps)"
		}
	}
	if len(a) > 3 {
		if k, _ := a[3].(string); strings.HasSuffix(k, ":pending") && len(a) > 6 {
			if k2, _ := a[4].(string); strings.HasSuffix(k2, ":paused") {
				if err == redis.Nil {
					return " → empty (worker loop sleeps)"
				}
				return " → a task"
			}
		}
	}
	return ""
}

// labelStat is what the client saw of one label.
type labelStat struct {
	calls int64
	wait  time.Duration // round-trip time, summed
}

// counter is a go-redis hook that counts the commands a client sends, by
// label, and their round-trip times. A pipeline is one round trip; each of
// its commands is counted under its label.
type counter struct {
	mu         sync.Mutex
	stats      map[string]*labelStat
	roundTrips int64
}

func newCounter() *counter { return &counter{stats: map[string]*labelStat{}} }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		el := time.Since(start)
		l := commandLabel(argStrings(cmd)) + outcome(cmd, err)
		c.mu.Lock()
		s := c.stat(l)
		s.calls++
		s.wait += el
		c.roundTrips++
		c.mu.Unlock()
		return err
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		el := time.Since(start)
		c.mu.Lock()
		for _, cmd := range cmds {
			s := c.stat(commandLabel(argStrings(cmd)))
			s.calls++
			s.wait += el / time.Duration(len(cmds))
		}
		c.roundTrips++
		c.mu.Unlock()
		return err
	}
}

func (c *counter) stat(l string) *labelStat {
	s, ok := c.stats[l]
	if !ok {
		s = &labelStat{}
		c.stats[l] = s
	}
	return s
}

// snapshot copies the counts so far.
type counts struct {
	stats      map[string]labelStat
	roundTrips int64
}

func (c *counter) snapshot() counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := counts{stats: make(map[string]labelStat, len(c.stats)), roundTrips: c.roundTrips}
	for k, v := range c.stats {
		out.stats[k] = *v
	}
	return out
}

// sub returns b − a.
func (b counts) sub(a counts) counts {
	out := counts{stats: map[string]labelStat{}, roundTrips: b.roundTrips - a.roundTrips}
	for k, v := range b.stats {
		w := a.stats[k]
		if n := v.calls - w.calls; n > 0 {
			out.stats[k] = labelStat{calls: n, wait: v.wait - w.wait}
		}
	}
	return out
}

// labels returns the labels, the most called first.
func (b counts) labels() []string {
	ls := make([]string, 0, len(b.stats))
	for k := range b.stats {
		ls = append(ls, k)
	}
	sort.Slice(ls, func(i, j int) bool {
		if b.stats[ls[i]].calls != b.stats[ls[j]].calls {
			return b.stats[ls[i]].calls > b.stats[ls[j]].calls
		}
		return ls[i] < ls[j]
	})
	return ls
}

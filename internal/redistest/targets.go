package redistest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Target is one Redis that a behaviour suite runs against.
type Target struct {
	// Name names the subtest: "miniredis", "redis-standalone" or
	// "redis-cluster". CI checks that the real ones passed.
	Name string
	// Client returns a client of the target for tb.
	Client func(tb testing.TB) redis.UniversalClient
}

// Targets returns the Redis every behaviour is tested on: an embedded
// miniredis (a new one per call, fast), the package's shared standalone
// redis-server and its shared three-master cluster. Tests on the shared
// ones keep their keys under KeyPrefix.
func Targets() []Target {
	return []Target{
		{"miniredis", func(tb testing.TB) redis.UniversalClient { return Mini(tb) }},
		{"redis-standalone", func(tb testing.TB) redis.UniversalClient { return Shared(tb) }},
		{"redis-cluster", func(tb testing.TB) redis.UniversalClient { return SharedCluster(tb) }},
	}
}

// Mini starts a miniredis for tb and returns a client of it; both stop
// when tb ends.
func Mini(tb testing.TB) *redis.Client {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { c.Close() })
	return c
}

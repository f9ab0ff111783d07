package redistest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// The test binary's shared servers, each started by the first test that
// asks for it. A failed start fails every later caller without a retry.
var shared struct {
	serverOnce, clusterOnce sync.Once
	server                  *Server
	cluster                 *Cluster
	serverErr, clusterErr   error
}

// Shared returns a new client (closed when tb's test ends) of the test
// binary's shared standalone redis-server, with no password and no
// persistence, which the first caller starts (after Require) and Main
// stops. Tests on it use keys under KeyPrefix(tb) and never flush.
func Shared(tb testing.TB) *redis.Client {
	tb.Helper()
	Require(tb)
	shared.serverOnce.Do(func() { shared.server, shared.serverErr = launch(Config{}, false) })
	if shared.serverErr != nil {
		tb.Fatalf("redistest: the shared redis-server is unavailable: %v", shared.serverErr)
	}
	return shared.server.Client(tb)
}

// SharedCluster returns a new client (closed when tb's test ends) of the
// test binary's shared three-master cluster, which the first caller starts
// (see StartCluster). Otherwise as Shared.
func SharedCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	Require(tb)
	shared.clusterOnce.Do(func() { shared.cluster, shared.clusterErr = newCluster() })
	if shared.clusterErr != nil {
		tb.Fatalf("redistest: the shared cluster is unavailable: %v", shared.clusterErr)
	}
	return shared.cluster.Client(tb)
}

// Main runs the tests, kills the shared servers that were started and
// deletes their data, and exits with m.Run's code; when every test passed,
// it also fails the run if goroutines the tests started are still running
// a few seconds later (go.uber.org/goleak). go-redis's own log lines are
// dropped: a test that takes its Redis down on purpose would print one
// "failed to dial" line for each attempt, and the command's error says
// the same once. Use it as TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	redis.SetLogger(quietDriver{})
	code := m.Run()
	if s := shared.server; s != nil {
		_ = s.Kill()
		s.remove()
	}
	if c := shared.cluster; c != nil {
		c.remove()
	}
	if code == 0 && !testing.Short() {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/sluicehq/sluice/internal/redistest.spawnLoop")); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	prefixCount atomic.Uint64
	notKeyChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
)

// KeyPrefix returns a prefix for the keys of tb's test that no other call
// returns in this test binary: "t<n>_<name>:", n counting the calls and
// name the test name's last 48 characters, each run of characters other
// than [A-Za-z0-9_-] made one '_'. With no '{' or '}', the key's hash tag
// is what the caller adds, e.g. KeyPrefix(t)+"{tenant}:bucket".
func KeyPrefix(tb testing.TB) string {
	name := notKeyChars.ReplaceAllString(tb.Name(), "_")
	return fmt.Sprintf("t%d_%s:", prefixCount.Add(1), name[max(0, len(name)-48):])
}

// Target is one Redis that a behaviour suite runs against.
type Target struct {
	Name   string                                    // the subtest: "miniredis", "redis-standalone" or "redis-cluster"
	Client func(tb testing.TB) redis.UniversalClient // a client of the target for tb
}

// Targets returns the Redis every behaviour is tested on: an embedded
// miniredis (a new one per call), the shared standalone redis-server and
// the shared cluster (keys under KeyPrefix).
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

// quietDriver is a go-redis logger that drops every line.
type quietDriver struct{}

func (quietDriver) Printf(context.Context, string, ...any) {}

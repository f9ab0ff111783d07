package redistest

import (
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
// asks for it. A failed start fails every later caller: retrying for each
// test would only repeat the same failure, slowly.
var shared struct {
	serverOnce, clusterOnce sync.Once
	server                  *Server
	cluster                 *Cluster
	serverErr, clusterErr   error
}

// Shared returns a new client (closed when tb's test ends) of the test
// binary's shared standalone redis-server, which the first caller starts
// (after Require). It has no password and no persistence. Tests on it use
// keys under KeyPrefix(tb) and never flush. Main stops it; in a package
// without Main it lives until the test binary exits.
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
// deletes their data, and exits with m.Run's code. When every test passed,
// it also fails the run if goroutines the tests started are still running
// a few seconds later (go.uber.org/goleak): a server, pacer or client that
// a test stopped must not leave work behind. Use it as TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
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
// returns in this test binary: "t<n>_<name>:", where n counts the calls
// and name is the last 48 characters of the test's name with each run of
// characters other than ASCII letters, digits, '_' and '-' made one '_'.
// It holds no '{' or '}', so a key's hash tag is whatever the caller puts
// after it, e.g. KeyPrefix(t)+"{tenant}:bucket".
func KeyPrefix(tb testing.TB) string {
	name := notKeyChars.ReplaceAllString(tb.Name(), "_")
	return fmt.Sprintf("t%d_%s:", prefixCount.Add(1), name[max(0, len(name)-48):])
}

// Target is one Redis that a behaviour suite runs against.
type Target struct {
	// Name names the subtest: "miniredis", "redis-standalone" or
	// "redis-cluster".
	Name string
	// Client returns a client of the target for tb.
	Client func(tb testing.TB) redis.UniversalClient
}

// Targets returns the Redis every behaviour is tested on: an embedded
// miniredis (a new one per call), the shared standalone redis-server and
// the shared cluster. Tests on the shared ones keep their keys under
// KeyPrefix.
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

// Package redistest runs real redis-server processes for sluice's tests and
// benchmarks: a standalone server (Start), a three-master Redis Cluster
// (StartCluster), and one of each shared by a whole test binary (Shared,
// SharedCluster, stopped by Main). Every process listens on 127.0.0.1 on a
// port that was free when it started, and the package only ever talks to
// the ports it picked itself: it never touches a Redis it did not start.
//
// # Skip or fail
//
// redis-server is looked up at $SLUICE_REDIS_SERVER when that is set (a
// path, or a name searched on the PATH), else as "redis-server" on the
// PATH. When it cannot be found, every function that needs it (Start,
// StartCluster, Shared, SharedCluster, or Require called directly) skips
// the calling test with a message saying how to install it. CI sets
// SLUICE_REQUIRE_REDIS=1: then a missing redis-server fails the test
// instead, so that a green run cannot hide real-Redis tests that were
// silently skipped.
//
// # Shared servers
//
// Starting a cluster takes over two seconds (a new master waits 2 s before
// it serves), so a package's tests share one standalone server and one
// cluster, each started by the first test that asks for it:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		rdb := redistest.Shared(t)
//		p := redistest.KeyPrefix(t) // every key of this test starts with p
//		...
//	}
//
// Tests on shared servers keep to keys under their KeyPrefix and never
// flush: other tests of the package run against the same data set,
// possibly in parallel.
//
// # Process lifetime
//
// Every redis-server is reaped by a goroutine of this package, runs in its
// own process group (so a ^C in the terminal reaches only the test binary)
// and, on Linux, gets SIGKILL as soon as the test binary exits, however it
// exits (a panic, a -timeout, a SIGKILL), so no server outlives the tests
// even when Main or a cleanup did not run. On other systems that last
// safety net does not exist.
package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Environment variables read by this package.
const (
	// EnvServer names the redis-server binary to run: a path, or a name
	// looked up on the PATH. When it is set, it is the only candidate: a
	// missing file makes redis-server unavailable, the PATH is not tried.
	EnvServer = "SLUICE_REDIS_SERVER"
	// EnvRequire, set to 1 (or another true value of strconv.ParseBool),
	// turns a missing redis-server from a skipped test into a failed one.
	EnvRequire = "SLUICE_REQUIRE_REDIS"
)

// notFound is the explanation given when redis-server cannot be run.
const notFound = "redis-server not found; install it (apt-get install redis-server) or set " + EnvServer

// lookup returns the redis-server binary to run, or an error saying why
// there is none. It is cheap, and not cached, so that tests can change
// EnvServer with t.Setenv.
func lookup() (string, error) {
	name := "redis-server"
	if v := os.Getenv(EnvServer); v != "" {
		name = v
	}
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(EnvServer) != "" {
			return "", fmt.Errorf("%s (%s=%s: %v)", notFound, EnvServer, name, unwrapExec(err))
		}
		return "", fmt.Errorf("%s", notFound)
	}
	return p, nil
}

// unwrapExec shortens exec's errors ("exec: "x": stat x: no such file or
// directory") to their cause.
func unwrapExec(err error) error {
	if e, ok := err.(*exec.Error); ok && e.Err != nil {
		return e.Err
	}
	return err
}

// Available reports whether redis-server can be run: found at
// $SLUICE_REDIS_SERVER when that is set, else on the PATH.
func Available() bool {
	_, err := lookup()
	return err == nil
}

// required reports whether EnvRequire asks for a failure instead of a skip.
func required() bool {
	v, err := strconv.ParseBool(strings.TrimSpace(os.Getenv(EnvRequire)))
	return err == nil && v
}

// Require returns when redis-server is available. Otherwise it skips tb
// with a message saying how to install it, or, when the environment has
// SLUICE_REQUIRE_REDIS=1, fails tb with the same explanation. Start,
// StartCluster, Shared and SharedCluster call it first.
func Require(tb testing.TB) {
	tb.Helper()
	_, err := lookup()
	if err == nil {
		return
	}
	if required() {
		tb.Fatalf("%v; %s=1 makes this a failure instead of a skip", err, EnvRequire)
		return
	}
	tb.Skipf("%v; skipping real-Redis test", err)
}

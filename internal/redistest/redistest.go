// Package redistest runs real redis-server processes for sluice's tests and
// benchmarks: a standalone server (Start, or Launch outside a test), a
// three-master Redis Cluster (StartCluster), and one of each shared by a
// test binary (Shared, SharedCluster; use Main as TestMain). Tests on the
// shared ones keep to keys under KeyPrefix and never flush. Every server
// listens on 127.0.0.1 on a port this package picked, so it never touches a
// Redis it did not start; it runs in its own process group and, on Linux,
// dies with the test binary however that exits.
//
// redis-server is $SLUICE_REDIS_SERVER, or found on the PATH. Without it,
// Require (which every function that needs it calls first) skips the test,
// or fails it when SLUICE_REQUIRE_REDIS=1, so that a green CI run cannot
// hide skipped real-Redis tests.
package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// Environment variables read by this package.
const (
	// EnvServer names the redis-server binary to run: a path, or a name
	// looked up on the PATH. When it is set, the PATH is not tried.
	EnvServer = "SLUICE_REDIS_SERVER"
	// EnvRequire, set to a true value (strconv.ParseBool), turns a missing
	// redis-server from a skipped test into a failed one.
	EnvRequire = "SLUICE_REQUIRE_REDIS"
)

// lookup returns the redis-server binary to run, or an error saying how to
// install it. It is not cached, so that tests can change EnvServer.
func lookup() (string, error) {
	name := os.Getenv(EnvServer)
	if name == "" {
		name = "redis-server"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redis-server not found; install it (apt-get install redis-server) or set %s (%v)", EnvServer, err)
	}
	return p, nil
}

// Require returns when redis-server is available. Otherwise it skips tb
// with a message saying how to install it or, when the environment has
// SLUICE_REQUIRE_REDIS=1, fails tb.
func Require(tb testing.TB) {
	tb.Helper()
	_, err := lookup()
	if err == nil {
		return
	}
	if req, _ := strconv.ParseBool(os.Getenv(EnvRequire)); req {
		tb.Fatalf("%v; %s=1 makes this a failure instead of a skip", err, EnvRequire)
	}
	tb.Skipf("%v; skipping real-Redis test", err)
}

// Package redistest runs real redis-server processes for sluice's tests and
// benchmarks: a standalone server (Start; Launch outside a test), a
// three-master Redis Cluster (StartCluster), a primary and a replica
// watched by three Sentinels (StartSentinel), and one standalone and one
// cluster shared by a test binary (Shared, SharedCluster; use Main as
// TestMain), on which tests keep to keys under KeyPrefix and never flush. Each server listens on a
// port of 127.0.0.1 that this package picked, in a process group of its own,
// and on Linux dies with the test binary however that exits. Without
// redis-server, Require skips the test, or fails it (EnvRequire).
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
	// looked up on the PATH. When it is set, the PATH is not tried. The
	// redis-cli beside it forms clusters.
	EnvServer = "SLUICE_REDIS_SERVER"
	// EnvRequire, set to a true value (strconv.ParseBool), turns a missing
	// redis-server from a skipped test into a failed one.
	EnvRequire = "SLUICE_REQUIRE_REDIS"
)

// lookup returns the redis-server binary to run (not cached, so that tests
// can change EnvServer), or an error saying how to install it.
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

// Require returns when redis-server is available. Otherwise it skips tb,
// saying how to install it, or fails tb under SLUICE_REQUIRE_REDIS=1.
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

package redistest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// errMainDone is the start error of a shared server requested after Main
// stopped them.
var errMainDone = errors.New("redistest: the shared servers were stopped by Main")

// The test binary's shared servers, each started by the first test that
// asks for it. A failed start is remembered and fails every later caller:
// retrying for each test would only repeat the same failure, slowly.
var (
	sharedServer struct {
		once sync.Once
		s    *Server
		dir  string
		err  error
	}
	sharedCluster struct {
		once sync.Once
		c    *Cluster
		dirs []string
		err  error
	}
)

// Shared returns a new client (closed when tb's test ends) of the test
// binary's shared standalone redis-server, which the first caller starts.
// It calls Require first, so without redis-server every caller is skipped
// (or failed, under SLUICE_REQUIRE_REDIS=1); when the server cannot start,
// every caller fails with the reason. The server has no password and no
// persistence. Tests on it use keys under KeyPrefix(tb) and never flush.
//
// Main stops the server after the tests. In a package without Main, it
// lives until the test binary exits, when the kernel kills it (Linux:
// parent-death signal) and its temporary directory is left behind.
func Shared(tb testing.TB) *redis.Client {
	tb.Helper()
	Require(tb)
	sh := &sharedServer
	sh.once.Do(func() {
		sh.dir, sh.err = os.MkdirTemp("", "sluice-redistest-")
		if sh.err != nil {
			sh.err = fmt.Errorf("redistest: %w", sh.err)
			return
		}
		sh.s, sh.err = launch(Config{}, sh.dir, false)
		if sh.err != nil {
			_ = os.RemoveAll(sh.dir)
		}
	})
	if sh.err != nil {
		tb.Fatalf("redistest: the shared redis-server is unavailable: %v", sh.err)
		return nil
	}
	return sh.s.Client(tb)
}

// SharedCluster returns a new client (closed when tb's test ends) of the
// test binary's shared three-master cluster, which the first caller starts
// (a little over 2 s; see StartCluster). Require, failures, key hygiene and the server's
// lifetime are as for Shared.
func SharedCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	Require(tb)
	sh := &sharedCluster
	sh.once.Do(func() {
		for range 3 {
			dir, err := os.MkdirTemp("", "sluice-redistest-cluster-")
			if err != nil {
				sh.err = fmt.Errorf("redistest: %w", err)
				break
			}
			sh.dirs = append(sh.dirs, dir)
		}
		if sh.err == nil {
			sh.c, sh.err = newCluster(sh.dirs)
		}
		if sh.err != nil {
			for _, d := range sh.dirs {
				_ = os.RemoveAll(d)
			}
		}
	})
	if sh.err != nil {
		tb.Fatalf("redistest: the shared cluster is unavailable: %v", sh.err)
		return nil
	}
	return sh.c.Client(tb)
}

// Main runs the tests (m.Run), then kills the shared servers that were
// started and removes their data, and exits with m.Run's code. Use it as a
// package's TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// When every test passed, Main also fails the run if goroutines the tests
// started are still running a few seconds later (go.uber.org/goleak): a
// server, pacer or client that a test stopped must not leave work behind.
// ignore names functions (as goleak.IgnoreTopFunction takes them) whose
// goroutines may outlive the tests.
func Main(m *testing.M, ignore ...string) {
	code := m.Run()
	stopShared()
	if code == 0 && !testing.Short() {
		if err := findLeaks(ignore); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks reports the goroutines still running besides this one, after
// giving them goleak's default grace to finish.
func findLeaks(ignore []string) error {
	opts := []goleak.Option{goleak.IgnoreTopFunction("github.com/sluicehq/sluice/internal/redistest.spawnLoop")}
	for _, f := range ignore {
		opts = append(opts, goleak.IgnoreTopFunction(f))
	}
	return goleak.Find(opts...)
}

// stopShared kills the shared servers. Once it has run, asking for them
// fails instead of starting new ones.
func stopShared() {
	sh := &sharedServer
	sh.once.Do(func() { sh.err = errMainDone })
	if sh.s != nil {
		_ = sh.s.Kill()
		release(sh.s.port, false)
		_ = os.RemoveAll(sh.dir)
		sh.s, sh.err = nil, errMainDone
	}
	sc := &sharedCluster
	sc.once.Do(func() { sc.err = errMainDone })
	if sc.c != nil {
		sc.c.kill()
		for _, d := range sc.dirs {
			_ = os.RemoveAll(d)
		}
		sc.c, sc.err = nil, errMainDone
	}
}

var prefixCount atomic.Uint64

// KeyPrefix returns a prefix for the keys of tb's test that no other call
// returns in this test binary: "t<n>_<test name>:", where n counts the
// calls and the test name keeps only letters, digits, '_' and '-' (its
// last 48 of them). It holds no '{' or '}', so a key's hash tag is
// whatever the caller puts after it, e.g. KeyPrefix(t)+"{tenant}:bucket".
func KeyPrefix(tb testing.TB) string {
	n := prefixCount.Add(1)
	name := []rune(sanitize(tb.Name()))
	if len(name) > 48 {
		name = name[len(name)-48:]
	}
	return fmt.Sprintf("t%d_%s:", n, string(name))
}

// sanitize replaces each run of characters other than ASCII letters,
// digits, '_' and '-' with one '_'.
func sanitize(s string) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		ok := r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		switch {
		case ok:
			b.WriteRune(r)
			under = false
		case !under:
			b.WriteByte('_')
			under = true
		}
	}
	return b.String()
}

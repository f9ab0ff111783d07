// Package redistest starts real redis-server processes on free loopback
// ports for tests and benchmarks, standalone and as a three-master Redis
// Cluster, and stops them when the test (or, for the shared ones, the test
// binary) ends. It never touches a Redis it did not start.
//
// When redis-server cannot be found (on the PATH, or at
// $SLUICE_REDIS_SERVER), Require skips the calling test with a message,
// unless SLUICE_REQUIRE_REDIS=1, in which case the test fails: CI sets it,
// so that a green run cannot hide skipped real-Redis tests.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// binary returns the path of redis-server, or "" when there is none.
func binary() string {
	if p := os.Getenv("SLUICE_REDIS_SERVER"); p != "" {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
		return ""
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// Available reports whether redis-server can be run.
func Available() bool { return binary() != "" }

// Required reports whether SLUICE_REQUIRE_REDIS=1 is set.
func Required() bool { return os.Getenv("SLUICE_REQUIRE_REDIS") == "1" }

const missing = "redis-server not found; install it (apt-get install redis-server) or set SLUICE_REDIS_SERVER"

// Require skips tb when redis-server is unavailable, or fails it when
// SLUICE_REQUIRE_REDIS=1.
func Require(tb testing.TB) {
	tb.Helper()
	if Available() {
		return
	}
	if Required() {
		tb.Fatalf("%s; SLUICE_REQUIRE_REDIS=1 forbids skipping real-Redis tests", missing)
	}
	tb.Skipf("%s; skipping real-Redis test", missing)
}

// Config configures one redis-server process.
type Config struct {
	// Args are extra redis-server arguments, e.g. "--appendonly", "yes".
	Args []string
	// Password sets requirepass when not empty.
	Password string
	// Dir is the data directory; a new temporary one when empty.
	Dir string
	// Cluster starts the server with cluster mode enabled.
	Cluster bool
}

// Server is one redis-server process started by this package.
type Server struct {
	cfg  Config
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Client returns a new client of the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.cfg.Password})
	tb.Cleanup(func() { c.Close() })
	return c
}

// freePort returns a loopback port that is free now, and whose cluster bus
// port (+10000) is free too when cluster is set.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			bus.Close()
			return port, nil
		}
	}
	return 0, errors.New("redistest: no free port pair found")
}

// start launches the process and waits until it answers PING.
func (s *Server) start() error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--logfile", "redis.log", "--daemonize", "no"}
	if s.cfg.Password != "" {
		args = append(args, "--requirepass", s.cfg.Password)
	}
	if s.cfg.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
	}
	args = append(args, s.cfg.Args...)
	cmd := exec.Command(binary(), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.cfg.Password, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		select {
		case <-done:
			return fmt.Errorf("redistest: redis-server on port %d exited at start: %s", s.port, s.log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redistest: redis-server on port %d not ready after 10s (%v): %s", s.port, err, s.log())
		}
		time.Sleep(wait)
	}
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func newServer(cfg Config) (*Server, error) {
	if !Available() {
		return nil, errors.New(missing)
	}
	dir := cfg.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sluice-redis-"); err != nil {
			return nil, err
		}
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(cfg.Cluster)
		if err != nil {
			return nil, err
		}
		s := &Server{cfg: cfg, port: port, dir: dir}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

// Start starts a dedicated redis-server for tb and stops it (and removes
// its data) when tb ends.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	Require(tb)
	own := cfg.Dir == ""
	s, err := newServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Kill()
		if own {
			os.RemoveAll(s.dir)
		}
	})
	return s
}

// Stop shuts the server down gracefully (SIGTERM) and waits for it.
func (s *Server) Stop() error { return s.signal(syscall.SIGTERM) }

// Kill stops the server with SIGKILL and waits for it.
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("redistest: redis-server on port %d did not stop on %v", s.port, sig)
	}
}

// Restart starts the server again on the same port and data directory
// (after Stop or Kill), and waits until it answers.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Kill()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the port may linger briefly
	}
	tb.Fatal(err)
}

// Cluster is a Redis Cluster of three masters and no replicas.
type Cluster struct {
	nodes []*Server
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.Addr())
	}
	return a
}

// Node returns the i-th master.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Client returns a new cluster client, closed when tb ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { cc.Close() })
	return cc
}

func (c *Cluster) stop() {
	for _, n := range c.nodes {
		n.Kill()
		os.RemoveAll(n.dir)
	}
}

func newCluster() (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		n, err := newServer(Config{Cluster: true})
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	ctx := context.Background()
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	var clients []*redis.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for i, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		clients = append(clients, cl)
		if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			c.stop()
			return nil, fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE: %w", err)
		}
	}
	for _, n := range c.nodes[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(n.port)).Err(); err != nil {
			c.stop()
			return nil, fmt.Errorf("redistest: CLUSTER MEET: %w", err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ready := true
		for _, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				ready = false
				break
			}
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, errors.New("redistest: cluster not ready after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every node must route: write a key to each master's slots.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	for {
		err := func() error {
			for _, k := range []string{"{a}", "{b}", "{c}", "{d}", "{e}"} {
				if err := cc.Set(ctx, "redistest:"+k, "1", time.Second).Err(); err != nil {
					return err
				}
			}
			return nil
		}()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("redistest: cluster does not route: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartCluster starts a three-master cluster for tb and stops it when tb
// ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	Require(tb)
	c, err := newCluster()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.stop)
	return c
}

var shared struct {
	mu          sync.Mutex
	server      *Server
	cluster     *Cluster
	serverErr   error
	clusterErr  error
	serverOnce  bool
	clusterOnce bool
}

// Shared returns a client of the package's shared standalone server,
// started on first use and stopped by Main. Tests on it must keep to keys
// under KeyPrefix(tb) and never flush it.
func Shared(tb testing.TB) *redis.Client {
	tb.Helper()
	Require(tb)
	shared.mu.Lock()
	if !shared.serverOnce {
		shared.serverOnce = true
		shared.server, shared.serverErr = newServer(Config{})
	}
	s, err := shared.server, shared.serverErr
	shared.mu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	return s.Client(tb)
}

// SharedCluster returns a client of the package's shared three-master
// cluster, started on first use and stopped by Main.
func SharedCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	Require(tb)
	shared.mu.Lock()
	if !shared.clusterOnce {
		shared.clusterOnce = true
		shared.cluster, shared.clusterErr = newCluster()
	}
	c, err := shared.cluster, shared.clusterErr
	shared.mu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	return c.Client(tb)
}

// Main runs the package's tests and then stops the shared servers:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// Without it the shared servers still die with the test binary
// (they are started with a parent-death signal).
func Main(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.server != nil {
		shared.server.Kill()
		os.RemoveAll(shared.server.dir)
	}
	if shared.cluster != nil {
		shared.cluster.stop()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

var (
	prefixes atomic.Int64
	unsafe   = regexp.MustCompile(`[^A-Za-z0-9]+`)
)

// KeyPrefix returns a prefix unique to this call, built from a counter and
// tb's name, for the keys of a test on a shared server.
func KeyPrefix(tb testing.TB) string {
	name := unsafe.ReplaceAllString(tb.Name(), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("t%d_%s:", prefixes.Add(1), name)
}

package redistest

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	timeout = 20 * time.Second   // bounds a start, a stop and the forming of a cluster
	logName = "redis-server.log" // the server's stdout and stderr, in its data directory
)

// errPortTaken marks a start that lost its port to another process.
var errPortTaken = errors.New("port already in use")

// Config configures one redis-server process.
type Config struct {
	// Args are extra redis-server arguments, which override the defaults
	// (no persistence), e.g. "--appendonly", "yes", "--appendfsync",
	// "always". They must not set --port, --bind or --dir.
	Args []string
	// Password sets requirepass when not empty; Client and Options use it.
	Password string
}

// Server is one redis-server process started by this package, listening on
// 127.0.0.1, with a temporary data directory of its own. Its methods are
// safe for concurrent use.
type Server struct {
	port int
	dir  string
	pass string
	pre  []string // arguments before the defaults: a Sentinel's config file and --sentinel
	// ready is what the log says once the server is ready, in lower
	// case; default "ready to accept connections" (a Sentinel's differs).
	ready string
	args  []string

	mu   sync.Mutex // serialises Stop, Kill and Restart
	proc *process   // the current process
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's result, set before done is closed
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// across restarts.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Options returns new client options for the server (address, password).
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), Password: s.pass}
}

// Client returns a new client of the server, closed when tb's test ends.
// It keeps working across Restart (it reconnects).
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts a dedicated redis-server for tb (after Require), waits until
// it is ready, and registers a tb.Cleanup that stops it gracefully (see
// Stop) and removes its data. Failures, with the server's log, are fatal.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	Require(tb)
	s, stop, err := Launch(cfg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}

// Launch starts a redis-server outside a test, for commands such as the
// benchmarks under bench/: Start without the test. The caller must call
// stop, which stops the server gracefully and removes its data.
func Launch(cfg Config) (s *Server, stop func() error, err error) {
	if s, err = launch(cfg, false); err != nil {
		return nil, nil, err
	}
	return s, func() error {
		err := s.Stop()
		s.remove()
		return err
	}, nil
}

// launch starts a server, cluster-enabled or not, in a new temporary
// directory, on a free port (another when the one picked gets taken).
func launch(cfg Config, cluster bool) (*Server, error) {
	args := append([]string{"--save", "", "--appendonly", "no"}, cfg.Args...)
	if cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
	}
	if cfg.Password != "" {
		args = append(args, "--requirepass", cfg.Password)
	}
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp("", "sluice-redistest-")
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		s := &Server{dir: dir, pass: cfg.Password, args: args}
		if s.port, err = pickPort(cluster); err == nil {
			err = s.start()
		}
		if err == nil {
			return s, nil
		}
		s.remove()
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			return nil, err
		}
	}
}

// remove releases the server's ports and deletes its data directory; the
// process must be gone.
func (s *Server) remove() {
	reserved.Lock()
	delete(reserved.ports, s.port)
	delete(reserved.ports, s.port+busOffset)
	reserved.Unlock()
	_ = os.RemoveAll(s.dir)
}

// start runs redis-server on s.port and waits until its log says it is
// ready (after loading its data). On error the process is gone.
func (s *Server) start() error {
	bin, err := lookup()
	if err != nil {
		return err
	}
	logPath := filepath.Join(s.dir, logName)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	from, _ := logf.Seek(0, io.SeekEnd) // a restart appends to the log
	argv := append(append(slices.Clone(s.pre), "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--daemonize", "no", "--logfile", ""), s.args...)
	cmd := exec.Command(bin, argv...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, logf, logf
	err = StartProcess(cmd)
	logf.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("redistest: starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	deadline := time.Now().Add(timeout)
	for {
		log := readLog(logPath, from)
		switch {
		case strings.Contains(strings.ToLower(log), cmp.Or(s.ready, "ready to accept connections")):
			return nil
		case p.exited() && strings.Contains(log, "already in use"):
			return fmt.Errorf("redistest: %w: redis-server on %s exited; its log:\n%s", errPortTaken, s.Addr(), log)
		case p.exited():
			return fmt.Errorf("redistest: redis-server on %s exited while starting (%v); its log:\n%s", s.Addr(), p.err, log)
		case time.Now().After(deadline):
			_ = s.kill(p)
			return fmt.Errorf("redistest: redis-server on %s not ready within %v; its log:\n%s", s.Addr(), timeout, log)
		}
		select {
		case <-p.done:
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// readLog returns the log written since offset from, at most its last 4 KiB.
func readLog(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	b = b[min(from, int64(len(b))):]
	if len(b) > 4<<10 {
		b = append([]byte("..."), b[len(b)-4<<10:]...)
	}
	return strings.TrimRight(string(b), "\n")
}

// exited reports whether the process has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// PID returns the process id of the running redis-server, or 0 when it
// is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop stops the server gracefully: SIGTERM (redis-server then flushes its
// AOF when Config.Args turned it on), and waits for it to exit. When it
// has not exited within 20 s it is killed and Stop returns an error.
// Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p.exited() {
		return nil
	}
	_ = terminate(p.cmd.Process) // if it fails, the wait below times out
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("redistest: redis-server on %s exited with %v after SIGTERM; its log:\n%s",
				s.Addr(), p.err, readLog(filepath.Join(s.dir, logName), 0))
		}
		return nil
	case <-time.After(timeout):
		_ = s.kill(p)
		return fmt.Errorf("redistest: redis-server on %s did not exit within %v of SIGTERM; killed", s.Addr(), timeout)
	}
}

// Kill kills the server and its process group with SIGKILL and waits for
// it to be reaped. Killing a stopped server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kill(s.proc)
}

// kill SIGKILLs p's process group unless p has been reaped, and waits.
func (s *Server) kill(p *process) error {
	if !p.exited() {
		KillProcess(p.cmd.Process)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("redistest: redis-server on %s survived SIGKILL for %v", s.Addr(), timeout)
	}
}

// Restart stops a running server gracefully, starts it again on the same
// port and data directory, and waits until it is ready. Data survives when
// Config.Args persists it; a cluster node keeps its identity and slots (use
// Cluster.WaitHealthy next). Failures are fatal to tb.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.Stop(); err != nil {
		tb.Fatalf("%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another process may have taken the port while the server was down.
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		err := s.start()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr(), err)
		}
	}
}

// reserved holds the ports and bus ports of this process's servers, so
// that two of them never pick the same one however the kernel recycles
// ephemeral ports.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

const busOffset = 10000 // from a cluster node's port to its bus port

// pickPort reserves a loopback port that was free a moment ago; for a
// cluster node, port+busOffset must be free too.
func pickPort(cluster bool) (int, error) {
	reserved.Lock()
	defer reserved.Unlock()
	for range 100 {
		port, err := freePort(0)
		if err != nil {
			return 0, fmt.Errorf("redistest: no free loopback port: %w", err)
		}
		bus := port + busOffset // reserved for every server, so reservations never overlap
		if reserved.ports[port] || reserved.ports[bus] || cluster && bus > 65535 {
			continue
		}
		if _, err := freePort(bus); cluster && err != nil {
			continue
		}
		reserved.ports[port], reserved.ports[bus] = true, true
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port in 100 tries")
}

// freePort listens on 127.0.0.1:port (0: any), closes, and returns the
// port that was bound.
func freePort(port int) (int, error) {
	l, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

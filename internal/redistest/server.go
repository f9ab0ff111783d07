package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// readyTimeout bounds the wait for a started process to answer PING.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds the wait for a process to exit after a signal.
	stopTimeout = 10 * time.Second
	// startAttempts bounds the ports tried when the one picked gets taken
	// before redis-server binds it.
	startAttempts = 5
	// logName is the file, in the data directory, that receives the
	// server's stdout and stderr (its log).
	logName = "redis-server.log"
	// logTail is how much of the log an error quotes.
	logTail = 4 << 10
)

// errPortTaken marks a start that failed because another process holds
// the port: the caller may try again on another one.
var errPortTaken = errors.New("port already in use")

// Config configures one redis-server process.
type Config struct {
	// Args are extra redis-server arguments, appended after the harness's
	// own, so that they override its defaults (e.g. "--appendonly", "yes",
	// "--appendfsync", "always"). They must not set --port, --bind or
	// --dir, which the harness owns.
	Args []string
	// Password sets requirepass when not empty; Client and Options use it.
	Password string
	// Dir is the data directory (created when missing). When empty, the
	// server gets a fresh temporary one, removed after the test.
	Dir string
}

// Server is one redis-server process started by this package, listening on
// 127.0.0.1. Its methods are safe for concurrent use; Stop, Kill and
// Restart are serialised.
type Server struct {
	port    int
	dir     string
	pass    string
	args    []string // extra arguments: Config.Args, and cluster mode
	cluster bool

	life sync.Mutex // serialises Stop, Kill and Restart
	mu   sync.Mutex // guards proc
	proc *process   // the current process; nil before the first start
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's result, set before done is closed
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

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's TCP port. It does not change across restarts.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data directory (where the AOF, RDB, nodes.conf
// and the log file redis-server.log live).
func (s *Server) Dir() string { return s.dir }

// Options returns new client options for the server: its address and
// password. Callers may change them before redis.NewClient.
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

// Start starts a dedicated redis-server for tb (skipping tb as Require
// does when there is none), waits until it answers PING, and registers a
// tb.Cleanup that stops it (gracefully, see Stop). By default it has no persistence: --save ""
// --appendonly no, unless cfg.Args says otherwise. Failures, with the
// server's log, are fatal to tb.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	Require(tb)
	dir := cfg.Dir
	if dir == "" {
		dir = tb.TempDir() // removed after the cleanup below has run
	}
	s, err := launch(cfg, dir, false)
	if err != nil {
		tb.Fatalf("%v", err)
		return nil
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("%v", err)
		}
		release(s.port, false)
	})
	return s
}

// Launch starts a redis-server outside a test, for commands such as the
// benchmarks under bench/: like Start, but it returns errors instead of
// failing a test. With cfg.Dir empty the server gets a fresh temporary
// directory. The caller must call the returned stop, which stops the
// server and removes a directory Launch created.
func Launch(cfg Config) (s *Server, stop func() error, err error) {
	if _, err := lookup(); err != nil {
		return nil, nil, err
	}
	dir, tmp := cfg.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sluice-redis-"); err != nil {
			return nil, nil, fmt.Errorf("redistest: %w", err)
		}
		tmp = true
	}
	if s, err = launch(cfg, dir, false); err != nil {
		if tmp {
			_ = os.RemoveAll(dir)
		}
		return nil, nil, err
	}
	return s, func() error {
		err := s.Stop()
		release(s.port, false)
		if tmp {
			if rerr := os.RemoveAll(dir); err == nil {
				err = rerr
			}
		}
		return err
	}, nil
}

// launch creates a server in dir and starts it on a free port, trying
// another port when the one picked got taken in the meantime.
func launch(cfg Config, dir string, cluster bool) (*Server, error) {
	dir, err := filepath.Abs(dir) // redis-server runs in dir: a relative --dir would nest
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	args := append([]string(nil), cfg.Args...)
	var last error
	for range startAttempts {
		port, err := pickPort(cluster)
		if err != nil {
			return nil, err
		}
		s := &Server{port: port, dir: dir, pass: cfg.Password, args: args, cluster: cluster}
		err = s.start()
		if err == nil {
			return s, nil
		}
		release(port, cluster)
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("redistest: gave up after %d ports were taken before redis-server could bind them: %w", startAttempts, last)
}

// argv returns the command line of the server.
func (s *Server) argv() []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "", // stdout, which goes to logName
		"--save", "",
		"--appendonly", "no",
	}
	if s.pass != "" {
		a = append(a, "--requirepass", s.pass)
	}
	if s.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		)
	}
	return append(a, s.args...)
}

// start runs redis-server on s.port and waits until it answers. On error
// the process is gone.
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
	from, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		from = 0
	}
	fmt.Fprintf(logf, "--- redistest: %s %s\n", bin, strings.Join(quoteArgs(s.argv()), " "))

	cmd := exec.Command(bin, s.argv()...)
	cmd.Dir = s.dir
	cmd.Stdout = logf // an *os.File: handed to the child, no copying goroutine
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	err = spawn(cmd)
	logf.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("redistest: starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	if err := s.waitReady(p, logPath, from); err != nil {
		s.kill(p)
		return err
	}
	return nil
}

// quoteArgs quotes the arguments that are empty or hold blanks or quotes,
// and hides the password, for the log line.
func quoteArgs(a []string) []string {
	q := make([]string, len(a))
	for i, s := range a {
		switch {
		case i > 0 && a[i-1] == "--requirepass":
			s = "(hidden)"
		case s == "" || strings.ContainsAny(s, " \t\"'"):
			s = strconv.Quote(s)
		}
		q[i] = s
	}
	return q
}

// probeOptions are the options of the harness's own short-lived clients:
// no retries, short timeouts, and no optional handshake commands. A
// go-redis pool whose dial failed answers with that failure, without
// dialling, for up to a second, so the harness makes a new probe client
// for each attempt rather than reuse one that may have failed.
func probeOptions(addr, pass string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		Password:                 pass,
		Protocol:                 2,
		DialTimeout:              500 * time.Millisecond,
		DialerRetries:            1,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		MaxRetries:               -1,
		PoolSize:                 1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// listening reports whether addr accepts TCP connections, without a word
// of Redis protocol.
func listening(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	return conn.Close()
}

// waitReady polls until the process answers PING, it exits, or
// readyTimeout passes. A PING answered by another process (one that held
// the port first) is detected from INFO's process_id and reported as
// errPortTaken without touching that server further.
func (s *Server) waitReady(p *process, logPath string, from int64) error {
	pid := strconv.Itoa(p.cmd.Process.Pid)
	deadline := time.Now().Add(readyTimeout)
	wait := 2 * time.Millisecond
	for {
		if p.exited() {
			return s.exitError(p, logPath, from)
		}
		// The PING runs aside: a process that is not Redis may accept the
		// connection and never answer, while ours exits for want of the
		// port.
		type result struct {
			other string
			err   error
		}
		res := make(chan result, 1)
		go func() {
			other, err := s.ping(pid)
			res <- result{other, err}
		}()
		var other string
		var err error
		select {
		case r := <-res:
			other, err = r.other, r.err
		case <-p.done:
			return s.exitError(p, logPath, from)
		}
		switch {
		case err == nil:
			return nil
		case other != "":
			return fmt.Errorf("redistest: %w: another server (pid %s) answers on %s", errPortTaken, other, s.Addr())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server (pid %s) on %s did not answer PING within %v (last error: %v); its log:\n%s",
				pid, s.Addr(), readyTimeout, err, readLog(logPath, from))
		}
		select {
		case <-p.done:
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// ping checks once that the server answers PING and is process pid. When
// another process answers, it returns that process's pid.
func (s *Server) ping(pid string) (other string, err error) {
	if err := listening(s.Addr()); err != nil {
		return "", err
	}
	c := redis.NewClient(probeOptions(s.Addr(), s.pass))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	if got := infoField(info, "process_id"); got != pid {
		return got, fmt.Errorf("process %s answers", got)
	}
	return "", nil
}

// exitError describes a process that exited while starting.
func (s *Server) exitError(p *process, logPath string, from int64) error {
	log := readLog(logPath, from)
	if strings.Contains(log, "already in use") {
		return fmt.Errorf("redistest: %w: redis-server on %s exited (%v); its log:\n%s", errPortTaken, s.Addr(), p.err, log)
	}
	return fmt.Errorf("redistest: redis-server on %s exited while starting (%v); its log:\n%s", s.Addr(), p.err, log)
}

// readLog returns the log written since offset from, at most its last
// logTail bytes.
func readLog(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	if len(b) > logTail {
		b = append([]byte("..."), b[len(b)-logTail:]...)
	}
	return strings.TrimRight(string(b), "\n")
}

// infoField returns the value of key in an INFO reply, or "".
func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// current returns the current process, or nil.
func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Running reports whether the server's process is alive (it may not be
// answering yet, or any more).
func (s *Server) Running() bool {
	p := s.current()
	return p != nil && !p.exited()
}

// Stop stops the server gracefully: SIGTERM (redis-server then flushes its
// AOF when it has one, and saves an RDB only when save points were
// configured through Config.Args), and waits for it to exit. When it has
// not exited after 10 s it is killed and Stop returns an error. Stopping a
// stopped server does nothing.
func (s *Server) Stop() error {
	s.life.Lock()
	defer s.life.Unlock()
	p := s.current()
	if p == nil || p.exited() {
		return nil
	}
	if err := terminate(p.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.kill(p)
		return fmt.Errorf("redistest: stopping redis-server on %s: %w", s.Addr(), err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("redistest: redis-server on %s exited with %v after SIGTERM; its log:\n%s",
				s.Addr(), p.err, readLog(filepath.Join(s.dir, logName), 0))
		}
		return nil
	case <-time.After(stopTimeout):
		s.kill(p)
		return fmt.Errorf("redistest: redis-server on %s did not exit within %v of SIGTERM; killed", s.Addr(), stopTimeout)
	}
}

// Kill kills the server with SIGKILL (with its process group: a child
// forked for BGSAVE or an AOF rewrite dies too) and waits for it to be
// reaped. Killing a stopped server does nothing.
func (s *Server) Kill() error {
	s.life.Lock()
	defer s.life.Unlock()
	p := s.current()
	if p == nil {
		return nil
	}
	return s.kill(p)
}

// kill SIGKILLs p's process group unless p has already been reaped, and
// waits until it is.
func (s *Server) kill(p *process) error {
	if !p.exited() {
		killGroup(p.cmd.Process)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redistest: redis-server on %s (pid %d) survived SIGKILL for %v", s.Addr(), p.cmd.Process.Pid, stopTimeout)
	}
}

// Restart starts the server again on the same port, with the same data
// directory and arguments, and waits until it answers PING; a server that
// is still running is stopped gracefully first. Data survives when the
// configuration persists it (e.g. Config.Args "--appendonly", "yes",
// "--appendfsync", "always" survives even Kill). A cluster node keeps its
// identity and slots (nodes.conf); use Cluster.WaitHealthy before relying
// on the cluster again. Failures are fatal to tb.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.Stop(); err != nil {
		tb.Fatalf("%v", err)
		return
	}
	s.life.Lock()
	defer s.life.Unlock()
	deadline := time.Now().Add(readyTimeout)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := s.start()
		if err == nil {
			return
		}
		// The port is ours, but another process may have taken it while
		// the server was down: wait a little for it to go away.
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr(), err)
			return
		}
		time.Sleep(wait)
	}
}

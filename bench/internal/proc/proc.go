// Package proc runs the child processes of the benchmark commands (built
// workers, an API, busy loops): each in its own process group, its output
// in a log file that a caller can wait on for a line, stopped with SIGTERM
// and then killed, and on Linux killed with the benchmark if it dies.
package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Child is a process the benchmark started: a worker, the API or the busy
// loops. Its standard output and error go to a log file, line by line
// through a watcher that can wait for a line.
type Child struct {
	// Name names the process in errors ("worker 2").
	Name string
	cmd  *exec.Cmd
	out  *lineWatch
	logf *os.File
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// Start starts bin with args in its own process group, its output in
// logPath.
func Start(name, logPath, bin string, args ...string) (*Child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &Child{Name: name, cmd: exec.Command(bin, args...), logf: f, done: make(chan struct{})}
	c.out = &lineWatch{w: f}
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := redistest.StartProcess(c.cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// Exited reports whether the process has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// WaitLine waits for an output line holding want and returns it.
func (c *Child) WaitLine(ctx context.Context, want string, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	ch := c.out.watch(want)
	select {
	case line := <-ch:
		return line, nil
	case <-c.done:
		// The line may have come just before the exit.
		select {
		case line := <-ch:
			return line, nil
		default:
		}
		return "", fmt.Errorf("%s exited (%v) before printing %q; its output:\n%s", c.Name, c.err, want, c.Tail())
	case <-ctx.Done():
		return "", fmt.Errorf("%s printed no %q within %v: %w; its output:\n%s", c.Name, want, limit, ctx.Err(), c.Tail())
	}
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills the
// process group. It returns the exit status, or an error saying it had to
// kill.
func (c *Child) Stop(grace time.Duration) error {
	if c.Exited() {
		return c.err
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(grace):
	}
	redistest.KillProcess(c.cmd.Process)
	<-c.done
	return fmt.Errorf("%s: no exit %v after SIGTERM; killed", c.Name, grace)
}

// Kill kills the process group at once and waits for the exit.
func (c *Child) Kill() {
	if !c.Exited() {
		redistest.KillProcess(c.cmd.Process)
	}
	<-c.done
}

// Tail is the end of the process's output.
func (c *Child) Tail() string { return c.out.tail() }

// Err is the exit status once Exited reports true, nil before.
func (c *Child) Err() error {
	if !c.Exited() {
		return nil
	}
	return c.err
}

// Pid is the process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// lineWatch passes output on to w, keeps its last few KiB, and hands the
// first line that holds a watched string to whoever asked for it.
type lineWatch struct {
	w *os.File

	mu      sync.Mutex
	partial []byte // the current line so far
	last    []byte // the end of the output
	waiters []lineWaiter
}

type lineWaiter struct {
	want string
	ch   chan string
}

const keepTail = 4 << 10

func (l *lineWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = append(l.last, p...)
	if len(l.last) > 2*keepTail {
		l.last = append([]byte(nil), l.last[len(l.last)-keepTail:]...)
	}
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		kept := l.waiters[:0]
		for _, w := range l.waiters {
			if strings.Contains(line, w.want) {
				w.ch <- line
			} else {
				kept = append(kept, w)
			}
		}
		l.waiters = kept
	}
	return l.w.Write(p)
}

// watch returns a channel that receives the first line that holds want:
// one among the output kept so far, or else the first written from now
// on.
func (l *lineWatch) watch(want string) <-chan string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan string, 1)
	done := l.last[:max(0, len(l.last)-len(l.partial))] // the complete lines kept
	for line := range strings.Lines(string(done)) {
		if strings.Contains(line, want) {
			ch <- strings.TrimSuffix(line, "\n")
			return ch
		}
	}
	l.waiters = append(l.waiters, lineWaiter{want: want, ch: ch})
	return ch
}

func (l *lineWatch) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.last
	if len(s) > keepTail {
		s = s[len(s)-keepTail:]
	}
	return string(s)
}

// Group holds the processes running now, so that they can all be killed
// on the way out, whatever the path.
type Group struct {
	mu   sync.Mutex
	list []*Child
}

// Add adds c to the group.
func (cs *Group) Add(c *Child) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.list = append(cs.list, c)
}

// KillAll kills every child still running.
func (cs *Group) KillAll() {
	cs.mu.Lock()
	list := cs.list
	cs.list = nil
	cs.mu.Unlock()
	for _, c := range list {
		c.Kill()
	}
}

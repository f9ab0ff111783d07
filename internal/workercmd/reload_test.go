package workercmd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// lockedBuffer collects the worker's log from another goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSIGHUPReloads: SIGHUP makes the running worker reload its policy
// file: one with a mistake is refused, its problem logged on its line,
// and the worker runs on; a good one is taken up without a restart.
func TestSIGHUPReloads(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(policy, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("queue:\n  name: hup\n  bound: 10\ndownstreams:\n  api:\n    rate: 10\n")
	var stderr lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"-policy", policy, "-redis", "redis://" + srv.Addr() + "/0", "-listen", "127.0.0.1:0"}, io.Discard, &stderr)
	}()
	wait := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(stderr.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log:\n%s", what, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("sluice worker started")

	write("queue:\n  name: hup\n  bound: 10\ndownstreams:\n  api:\n    rate: -5\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	wait("reload refused; the running policy stands")
	if !strings.Contains(stderr.String(), "policy.yaml:6:11: downstreams.api.rate") {
		t.Errorf("the refusal does not name the problem's line:\n%s", stderr.String())
	}

	write("queue:\n  name: hup\n  bound: 10\ndownstreams:\n  api:\n    rate: 5\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	wait("sluice: policy reloaded")
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("exit %d after SIGINT's equivalent; want 0\n%s", c, stderr.String())
	}
}

package enqueuecmd

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedisDownSaysItFirst: with Redis unreachable, the first line on
// standard error is the command's own, and go-redis's "failed to dial"
// lines (four for one job, ten for stats) are not printed (issue 19,
// finding 12). go-redis writes to the process's standard error, not to
// Main's writer, so the command runs in a child process of this test.
func TestRedisDownSaysItFirst(t *testing.T) {
	if args := os.Getenv("SLUICE_TEST_ENQUEUE_ARGS"); args != "" {
		os.Exit(Main(context.Background(), strings.Split(args, "\x1f"), strings.NewReader(""), os.Stdout, os.Stderr))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-policy", policy, "-redis", "redis://" + dead + "/0", "-tenant", "a", "-type", "x"},
		{"-policy", policy, "-redis", "redis://" + dead + "/0", "stats"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRedisDownSaysItFirst$")
		cmd.Env = append(os.Environ(), "SLUICE_TEST_ENQUEUE_ARGS="+strings.Join(args, "\x1f"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitFailure {
			t.Fatalf("%v: %v; want exit %d\n%s", args[len(args)-1], err, ExitFailure, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if !strings.HasPrefix(lines[0], "enqueue: ") || strings.Contains(stderr.String(), "failed to dial") {
			t.Errorf("%v: standard error\n%s\nwant the command's own error first and no go-redis lines", args[len(args)-1], stderr.String())
		}
	}
}

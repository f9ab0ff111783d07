package policycheck_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enqueuecmd"
	"github.com/sluicehq/sluice/internal/policycheck"
	"github.com/sluicehq/sluice/internal/workercmd"
)

// eight are the problems of testdata/eight.yaml, each with its place.
var eight = []string{
	"eight.yaml:3:10: queue.bound: must be at least 1",
	`eight.yaml:7:15: downstreams.shopify.base_url: "{store}"`,
	"eight.yaml:8:11: downstreams.shopify.rate: must be at least 1",
	"eight.yaml:10:15: downstreams.shopify.max_wait: must be a duration",
	"eight.yaml:15:37: downstreams.openai.also[0].counts: must be cost",
	`eight.yaml:19:5: tenants.acme.limt: unknown field; did you mean "limit"?`,
	"eight.yaml:24:12: tenants.beta.burst: fixed_window has no burst",
	"eight.yaml:28:13: tenants.gamma.weight: must be at most 100",
}

// The three ways to check a file: the shared Run, and -check of the two
// commands. None is given a Redis, and none may need one: the
// environment's SLUICE_REDIS_URL is cleared, and -redis points at a port
// where nothing listens.
var checkers = map[string]func(path string, stdout, stderr *bytes.Buffer) int{
	"Run": func(path string, stdout, stderr *bytes.Buffer) int { return policycheck.Run(path, stdout, stderr) },
	"worker -check": func(path string, stdout, stderr *bytes.Buffer) int {
		return workercmd.Main(t0, []string{"-check", "-policy", path, "-redis", deadRedis}, stdout, stderr)
	},
	"enqueue -check": func(path string, stdout, stderr *bytes.Buffer) int {
		return enqueuecmd.Main(t0, []string{"-check", "-policy", path, "-redis", deadRedis}, strings.NewReader(""), stdout, stderr)
	},
}

func TestCheckFindsEveryProblem(t *testing.T) {
	t.Setenv("SLUICE_REDIS_URL", "")
	t.Setenv("SLUICE_REDIS_CLUSTER", "")
	for name, check := range checkers {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := check(filepath.Join("testdata", "eight.yaml"), &stdout, &stderr); code != policycheck.ExitInvalid {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, policycheck.ExitInvalid, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != len(eight)+1 {
				t.Fatalf("%d lines, want the %d problems and a count:\n%s", len(lines), len(eight), stderr.String())
			}
			for i, want := range eight {
				if !strings.HasPrefix(lines[i], filepath.Join("testdata", want)) {
					t.Errorf("line %d: %q, want it to start %q", i+1, lines[i], want)
				}
			}
			if want := "testdata/eight.yaml: 8 problems"; lines[len(eight)] != want {
				t.Errorf("last line %q, want %q", lines[len(eight)], want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout of an invalid file: %q", stdout.String())
			}
		})
	}
}

func TestCheckGoodFile(t *testing.T) {
	t.Setenv("SLUICE_REDIS_URL", "")
	t.Setenv("SLUICE_REDIS_CLUSTER", "")
	for name, check := range checkers {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := check(filepath.Join("testdata", "good.yaml"), &stdout, &stderr); code != policycheck.ExitOK {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
			}
			if want := `testdata/good.yaml: ok: queue "orders", 1 downstream, 1 tenant policy, 0 schedules` + "\n"; stdout.String() != want || stderr.Len() > 0 {
				t.Errorf("stdout %q, stderr %q; want %q and nothing", stdout.String(), stderr.String(), want)
			}
		})
	}
}

// TestCheckMissingFile: a file that cannot be read is exit 2 with the
// reason, and -check without -policy says what it needs.
func TestCheckMissingFile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := policycheck.Run(filepath.Join(t.TempDir(), "none.yaml"), &stdout, &stderr); code != policycheck.ExitInvalid || !strings.Contains(stderr.String(), "no such file") {
		t.Errorf("exit %d, stderr %q; want 2 and the reason", code, stderr.String())
	}
	stderr.Reset()
	if code := policycheck.Run("", &stdout, &stderr); code != policycheck.ExitInvalid || !strings.Contains(stderr.String(), "-check needs -policy") {
		t.Errorf("exit %d, stderr %q; want 2 and the missing -policy", code, stderr.String())
	}
}

// TestDocsCIExampleChecks runs the CI step of docs/operations.md as a
// shell would, on both files: the built worker's exit code is the step's.
func TestDocsCIExampleChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/worker")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "worker -check -policy policy.yaml") {
		t.Fatal("docs/operations.md has no CI step running worker -check -policy policy.yaml")
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sluicehq/sluice/cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for file, code := range map[string]int{"good.yaml": 0, "eight.yaml": 2} {
		cmd := exec.Command(bin, "-check", "-policy", filepath.Join("testdata", file))
		cmd.Env = append(os.Environ(), "SLUICE_REDIS_URL=", "SLUICE_REDIS_CLUSTER=")
		out, _ := cmd.CombinedOutput()
		if got := cmd.ProcessState.ExitCode(); got != code {
			t.Errorf("worker -check %s: exit %d, want %d\n%s", file, got, code, out)
		}
	}
}

// deadRedis is a Redis URL where nothing answers: a check that dialled
// it would fail.
const deadRedis = "redis://127.0.0.1:1/0"

var t0 = context.Background()

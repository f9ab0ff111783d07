package enqueuecmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// cli runs Main against a miniredis with a policy file of a queue bound to
// bound jobs, and returns the exit code, stdout and stderr.
type cli struct {
	t      *testing.T
	policy string
	redis  string
}

func newCLI(t *testing.T, bound int) *cli {
	m := miniredis.RunT(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, fmt.Appendf(nil, "queue:\n  name: cli\n  bound: %d\n", bound), 0o644); err != nil {
		t.Fatal(err)
	}
	return &cli{t: t, policy: policy, redis: "redis://" + m.Addr() + "/0"}
}

func (c *cli) run(stdin string, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"-policy", c.policy, "-redis", c.redis}, args...)
	code := Main(context.Background(), all, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestDuplicateIDExitCode: a job whose id is already queued is refused
// with exit code 5 and a message that says so, at once even with -wait;
// nothing is enqueued.
func TestDuplicateIDExitCode(t *testing.T) {
	c := newCLI(t, 100)
	code, out, errs := c.run("", "-tenant", "acme", "-type", "x", "-id", "order-1")
	if code != ExitOK || strings.TrimSpace(out) != "order-1" {
		t.Fatalf("first job: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, extra := range [][]string{nil, {"-wait", "-max-wait", "1h"}} {
		args := append([]string{"-tenant", "acme", "-type", "x", "-id", "order-1"}, extra...)
		code, out, errs = c.run("", args...)
		if code != ExitDuplicate || out != "" || !strings.Contains(errs, `duplicate job: a job with id "order-1" is already waiting in queue "cli"`) ||
			!strings.Contains(errs, "the job already queued will run") {
			t.Fatalf("duplicate %v: exit %d, stdout %q, stderr %q; want exit %d saying the id is queued", extra, code, out, errs, ExitDuplicate)
		}
	}
	code, out, _ = c.run("", "stats")
	if code != ExitOK || !strings.Contains(out, "depth        1 of 100") {
		t.Fatalf("stats: exit %d\n%s; want depth 1", code, out)
	}
}

// TestBulkDuplicates: in a JSON lines file, duplicates (of a queued job,
// or of an earlier line) are reported by line; the exit code is 5 when
// they are the only refusals, and a worse refusal's otherwise.
func TestBulkDuplicates(t *testing.T) {
	c := newCLI(t, 100)
	lines := strings.Join([]string{
		`{"tenant":"a","type":"x","id":"j1"}`,
		`{"tenant":"a","type":"x","id":"j2"}`,
		`{"tenant":"a","type":"x","id":"j1"}`,
		`{"tenant":"a","type":"x"}`,
	}, "\n") + "\n"
	code, out, errs := c.run(lines, "-f", "-")
	if code != ExitDuplicate || strings.Fields(out)[0] != "j1" || strings.Fields(out)[1] != "j2" || len(strings.Fields(out)) != 3 ||
		!strings.Contains(errs, `line 3: sluice: duplicate job: a job with id "j1"`) || !strings.Contains(errs, "4 lines, 3 accepted, 1 refused") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, line 3 refused", code, out, errs, ExitDuplicate)
	}
	// The same file again: every id'd line is a duplicate, and an invalid
	// line outranks them.
	code, _, errs = c.run(lines+`{"tenant":"a"}`+"\n", "-f", "-", "-q")
	if code != ExitUsage || strings.Count(errs, "duplicate job") != 3 {
		t.Fatalf("exit %d, stderr %q; want exit %d (invalid) and 3 duplicates", code, errs, ExitUsage)
	}
}

// TestNeverRunnableRefused: a job the policy already rules out (an
// unknown downstream, a cost above the downstream's burst, a sluice.http
// URL outside its downstream's base_url) is refused with exit 2 and the
// reason, and nothing is enqueued.
func TestNeverRunnableRefused(t *testing.T) {
	c := newCLI(t, 100)
	if err := os.WriteFile(c.policy, []byte("queue:\n  name: cli\n  bound: 100\ndownstreams:\n  api: {rate: 50, burst: 1, base_url: http://127.0.0.1:9/api/}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-tenant", "evil", "-type", "x", "-downstream", "nope"}, `unknown downstream "nope"`},
		{[]string{"-tenant", "evil", "-type", "x", "-downstream", "api", "-cost", "2"}, `cost 2 exceeds downstream "api"'s burst of 1`},
		{[]string{"-tenant", "evil", "-type", "sluice.http", "-downstream", "api", "-payload", `{"url":"http://127.0.0.1:9/admin"}`}, "no downstream's base_url covers"},
		{[]string{"-tenant", "evil", "-type", "sluice.http", "-payload", `{"url":"http://127.0.0.1:9/api/x"}`}, "must name its downstream"},
	} {
		code, out, errs := c.run("", tt.args...)
		if code != ExitUsage || out != "" || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d with %q", tt.args, code, out, errs, ExitUsage, tt.want)
		}
	}
	code, out, _ := c.run("", "stats")
	if code != ExitOK || !strings.Contains(out, "depth        0 of 100") {
		t.Fatalf("stats: exit %d\n%s; want depth 0", code, out)
	}
}

// TestBulkOneMeaning: a line whose tenant two readers would read apart (a
// key twice, a key in another case) is refused with its number; the
// others are read with every field the HTTP endpoint reads, timeout too.
func TestBulkOneMeaning(t *testing.T) {
	c := newCLI(t, 100)
	lines := strings.Join([]string{
		`{"tenant":"alice","TENANT":"mallory","type":"x"}`,
		`{"tenant":"alice","type":"x","\u0074enant":"mallory"}`,
		`{"tenant":"alice","type":"x","timeout":"2s"}`,
		`{"tenant":"alice","type":"x","downstrem":"api"}`,
	}, "\n")
	code, out, errs := c.run(lines, "-f", "-")
	if code != ExitUsage || strings.Count(out, "\n") != 1 ||
		!strings.Contains(errs, `line 1: not a JSON job: sluice: invalid job: unknown key "TENANT"`) ||
		!strings.Contains(errs, `line 2: not a JSON job: sluice: invalid job: key "tenant" given twice`) ||
		!strings.Contains(errs, `line 4: not a JSON job: sluice: invalid job: unknown key "downstrem"`) {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errs)
	}
}

package enqueuecmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
// or of an earlier line) are reported by line on stdout and stderr; the
// exit code is 5 when they are the only refusals. Running the file again
// reports each id'd line as a duplicate and enqueues only the line
// without an id again.
func TestBulkDuplicates(t *testing.T) {
	c := newCLI(t, 100)
	lines := strings.Join([]string{
		`{"tenant":"a","type":"x","id":"j1"}`,
		`{"tenant":"a","type":"x","id":"j2"}`,
		`{"tenant":"a","type":"x","id":"j1"}`,
		`{"tenant":"a","type":"x"}`,
	}, "\n") + "\n"
	code, out, errs := c.run(lines, "-f", "-")
	want := regexp.MustCompile(`^accepted 1 j1\naccepted 2 j2\nrefused 3 duplicate\naccepted 4 [0-9a-f]{32}\n$`)
	if code != ExitDuplicate || !want.MatchString(out) ||
		!strings.Contains(errs, `stdin:3: sluice: duplicate job: a job with id "j1"`) || !strings.Contains(errs, "4 of 4 jobs, 3 accepted, 1 refused") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, line 3 refused", code, out, errs, ExitDuplicate)
	}
	code, out, errs = c.run(lines, "-f", "-", "-q")
	want = regexp.MustCompile(`^refused 1 duplicate\nrefused 2 duplicate\nrefused 3 duplicate\naccepted 4 [0-9a-f]{32}\n$`)
	if code != ExitDuplicate || !want.MatchString(out) || strings.Count(errs, "duplicate job") != 3 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and 3 duplicates", code, out, errs, ExitDuplicate)
	}
}

// TestBulkBadLineEnqueuesNothing: a file with bad lines in the middle
// (not JSON, a job without a type, a job the policy rules out) is refused
// whole with exit 2, every bad line named as file:line: reason, and
// nothing is enqueued; the file fixed goes in whole.
func TestBulkBadLineEnqueuesNothing(t *testing.T) {
	c := newCLI(t, 100)
	if err := os.WriteFile(c.policy, []byte("queue:\n  name: cli\n  bound: 100\ndownstreams:\n  api: {rate: 50, burst: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	good := []string{`{"tenant":"a","type":"x","id":"j1"}`, `{"tenant":"a","type":"x","id":"j2","downstream":"api"}`}
	lines := []string{good[0], `{"tenant":"a","type":"x"`, "", `{"tenant":"a"}`, `{"tenant":"a","type":"x","downstream":"api","cost":2}`, good[1]}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := c.run("", "-f", file)
	if code != ExitUsage || out != "" ||
		!strings.Contains(errs, file+":2: sluice: invalid job:") ||
		!strings.Contains(errs, file+":4: sluice: invalid job: type is required") ||
		!strings.Contains(errs, file+`:5: sluice: invalid job: cost 2 exceeds downstream "api"'s burst of 1`) ||
		strings.Contains(errs, file+":1:") || strings.Contains(errs, file+":6:") ||
		!strings.Contains(errs, "3 bad lines in "+file+"; nothing enqueued") {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errs)
	}
	if code, out, _ := c.run("", "stats"); code != ExitOK || !strings.Contains(out, "depth        0 of 100") {
		t.Fatalf("stats: exit %d\n%s; want depth 0: nothing enqueued", code, out)
	}
	if err := os.WriteFile(file, []byte(strings.Join(good, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := c.run("", "-f", file, "-q"); code != ExitOK || out != "accepted 1 j1\naccepted 2 j2\n" || errs != "" {
		t.Fatalf("fixed file: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestBulkRetryAfterPartialFailure: a valid file that meets a full queue
// says per line what went in and what did not, with exit 4; once there is
// room, sending again the lines refused as queue-full enqueues exactly
// those, and sending the whole file again instead adds no id'd job twice.
func TestBulkRetryAfterPartialFailure(t *testing.T) {
	c := newCLI(t, 2)
	var lines []string
	for i := 1; i <= 4; i++ {
		lines = append(lines, fmt.Sprintf(`{"tenant":"t%d","type":"x","id":"j%d"}`, i, i))
	}
	file := strings.Join(lines, "\n")
	code, out, errs := c.run(file, "-f", "-", "-q")
	if code != ExitQueueFull || out != "accepted 1 j1\naccepted 2 j2\nrefused 3 queue-full\nrefused 4 queue-full\n" ||
		!strings.Contains(errs, "stdin:3: ") || !strings.Contains(errs, "stdin:4: ") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want lines 3 and 4 refused as queue-full, exit %d", code, out, errs, ExitQueueFull)
	}
	// The whole file again while the queue is still full: the accepted
	// lines are duplicates, the others still do not fit; nothing doubles.
	code, out, _ = c.run(file, "-f", "-", "-q")
	if code != ExitQueueFull || out != "refused 1 duplicate\nrefused 2 duplicate\nrefused 3 queue-full\nrefused 4 queue-full\n" {
		t.Fatalf("rerun: exit %d, stdout %q", code, out)
	}
	if code, out, _ := c.run("", "stats"); code != ExitOK || !strings.Contains(out, "depth        2 of 2") {
		t.Fatalf("stats: exit %d\n%s; want depth 2", code, out)
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
	if code != ExitUsage || out != "" ||
		!strings.Contains(errs, `stdin:1: sluice: invalid job: unknown key "TENANT"`) ||
		!strings.Contains(errs, `stdin:2: sluice: invalid job: key "tenant" given twice`) ||
		!strings.Contains(errs, `stdin:4: sluice: invalid job: unknown key "downstrem"`) || strings.Contains(errs, "stdin:3:") {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errs)
	}
	// Line 3, with its timeout, goes in once the bad lines are gone.
	code, out, errs = c.run(strings.Split(lines, "\n")[2], "-f", "-", "-q")
	if code != ExitOK || !strings.HasPrefix(out, "accepted 1 ") {
		t.Fatalf("line 3 alone: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestRunLater: -run-in and -run-at enqueue a job for later, which stats
// shows; both at once, a negative -run-in and a bad -run-at are usage
// errors that enqueue nothing; so is a run_in in a file line given with
// run_at.
func TestRunLater(t *testing.T) {
	c := newCLI(t, 100)
	if code, out, errs := c.run("", "-tenant", "acme", "-type", "x", "-run-in", "10m"); code != ExitOK {
		t.Fatalf("-run-in: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := c.run("", "-tenant", "acme", "-type", "x", "-run-at", "2099-01-01T00:00:00Z"); code != ExitUsage || !strings.Contains(errs, "run_at") {
		t.Fatalf("-run-at beyond the furthest delay: exit %d, stdout %q, stderr %q; want a usage error", code, out, errs)
	}
	for _, args := range [][]string{
		{"-run-in", "1m", "-run-at", "2030-01-01T00:00:00Z"},
		{"-run-in", "-1m"},
		{"-run-at", "tomorrow"},
	} {
		code, _, errs := c.run("", append([]string{"-tenant", "acme", "-type", "x"}, args...)...)
		if code != ExitUsage || errs == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", args, code, errs)
		}
	}
	code, out, _ := c.run(`{"tenant":"a","type":"x","run_in":"1m","run_at":"2030-01-01T00:00:00Z"}`+"\n", "-f", "-")
	if code == ExitOK {
		t.Fatalf("a line with run_in and run_at: exit 0, stdout %q", out)
	}
	code, out, _ = c.run("", "stats")
	if code != ExitOK || !strings.Contains(out, "depth        1 of 100") || !strings.Contains(out, "later        1 not due yet") {
		t.Fatalf("stats: exit %d\n%s; want the one job for later", code, out)
	}
}

// TestJobChecks: the CLI refuses, with exit 2 and nothing enqueued, a
// job of a type the policy's queue.types does not list (naming the known
// types), a tenant id not in Unicode NFC, and a cost above queue.MaxCost;
// from -f, each by its line. A listed type is accepted.
func TestJobChecks(t *testing.T) {
	c := newCLI(t, 100)
	if err := os.WriteFile(c.policy, []byte("queue:\n  name: cli\n  bound: 100\n  types: [email.send]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-tenant", "a", "-type", "junk"}, `unknown job type "junk": no worker of queue "cli" handles it (the policy's queue.types); known types: email.send, sluice.http`},
		{[]string{"-tenant", "cafe\u0301", "-type", "email.send"}, `tenant id "cafe\u0301" is not in Unicode normalization form C (NFC); normalise it first (as "caf\u00e9")`},
		{[]string{"-tenant", "a", "-type", "email.send", "-cost", "9223372036854775807"}, "cost must be at most 1099511627776"},
	} {
		code, out, errs := c.run("", tt.args...)
		if code != ExitUsage || out != "" || !strings.Contains(errs, tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %s", tt.args, code, out, errs, ExitUsage, tt.want)
		}
	}
	lines := `{"tenant":"a","type":"email.send"}` + "\n" + `{"tenant":"a","type":"junk"}` + "\n" +
		`{"tenant":"cafe\u0301","type":"email.send"}` + "\n" + `{"tenant":"a","type":"email.send","cost":1099511627777}` + "\n"
	code, out, errs := c.run(lines, "-f", "-")
	if code != ExitUsage || out != "" || !strings.Contains(errs, `stdin:2: sluice: invalid job: unknown job type "junk"`) ||
		!strings.Contains(errs, "stdin:3: sluice: invalid job: tenant id") || !strings.Contains(errs, "stdin:4: sluice: invalid job: cost must be at most") ||
		!strings.Contains(errs, "3 bad lines in stdin; nothing enqueued") {
		t.Fatalf("-f: exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	if code, out, _ := c.run("", "stats"); code != ExitOK || !strings.Contains(out, "depth        0 of 100") {
		t.Fatalf("stats: exit %d\n%s; want depth 0", code, out)
	}
	if code, _, errs := c.run("", "-tenant", "caf\u00e9", "-type", "email.send", "-cost", "1099511627776"); code != ExitOK {
		t.Fatalf("a listed type, an NFC tenant and cost MaxCost: exit %d\n%s", code, errs)
	}
}

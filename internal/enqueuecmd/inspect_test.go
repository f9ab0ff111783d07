package enqueuecmd

import (
	"strings"
	"testing"
)

// TestWhyListCancelDelete: the subcommands find a job, list a tenant's
// jobs by page with a cursor, cancel a job for later and delete a
// waiting one, with the exit codes a script can act on.
func TestWhyListCancelDelete(t *testing.T) {
	c := newCLI(t, 100)
	for _, id := range []string{"a", "b", "c"} {
		if code, _, errs := c.run("", "-tenant", "acme", "-type", "x", "-id", id); code != ExitOK {
			t.Fatalf("enqueue %s: exit %d: %s", id, code, errs)
		}
	}
	if code, _, errs := c.run("", "-tenant", "acme", "-type", "x", "-id", "soon", "-run-in", "1h"); code != ExitOK {
		t.Fatalf("enqueue soon: exit %d: %s", code, errs)
	}
	code, out, errs := c.run("", "why", "c", "-tenant", "acme")
	if code != ExitOK || !strings.HasPrefix(out, "waiting: ") || !strings.Contains(out, "behind 2 jobs of its tenant (of 3 waiting)") {
		t.Fatalf("why c: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = c.run("", "why", "-tenant", "acme", "soon")
	if code != ExitOK || !strings.HasPrefix(out, "later: due at ") {
		t.Fatalf("why soon: exit %d\n%s", code, out)
	}
	code, out, _ = c.run("", "list", "-tenant", "acme", "-limit", "2")
	if code != ExitOK || !strings.Contains(out, "0\ta\tx") || !strings.Contains(out, "1\tb\tx") || !strings.Contains(out, "# 2 of 3 waiting; next page: -cursor 2") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	code, out, _ = c.run("", "list", "-tenant", "acme", "-limit", "2", "-cursor", "2")
	if code != ExitOK || !strings.Contains(out, "2\tc\tx") || !strings.HasSuffix(out, "# 1 of 3 waiting\n") {
		t.Fatalf("list's second page: exit %d\n%s", code, out)
	}
	if code, out, _ = c.run("", "list", "-tenant", "acme", "-delayed"); code != ExitOK || !strings.Contains(out, "soon\tx") {
		t.Fatalf("list -delayed: exit %d\n%s", code, out)
	}
	if code, _, errs = c.run("", "cancel", "b", "-tenant", "acme"); code != ExitUsage || !strings.Contains(errs, "delete it instead") {
		t.Fatalf("cancel of a due job: exit %d: %s", code, errs)
	}
	if code, out, _ = c.run("", "cancel", "soon", "-tenant", "acme"); code != ExitOK || out != "cancelled soon\n" {
		t.Fatalf("cancel soon: exit %d %q", code, out)
	}
	if code, out, _ = c.run("", "delete", "b", "-tenant", "acme"); code != ExitOK || out != "deleted b\n" {
		t.Fatalf("delete b: exit %d %q", code, out)
	}
	if code, _, errs = c.run("", "why", "b", "-tenant", "acme"); code != ExitNotFound || !strings.Contains(errs, "no such job") {
		t.Fatalf("why of a deleted job: exit %d: %s", code, errs)
	}
	if code, _, errs = c.run("", "why", "c"); code != ExitUsage || !strings.Contains(errs, "-tenant is required") {
		t.Fatalf("why without a tenant: exit %d: %s", code, errs)
	}
	code, out, _ = c.run("", "stats")
	if code != ExitOK || !strings.Contains(out, "depth        2 of 100") || !strings.Contains(out, "later        0") {
		t.Fatalf("stats after the edits: exit %d\n%s", code, out)
	}
}

package enqueuecmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSentinelURL: the CLI enqueues, and manages keys, through a
// redis+sentinel:// URL.
func TestSentinelURL(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelConfig{Password: "srv-pw", SentinelPassword: "sen-pw"})
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: sentinel\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"-policy", policy, "-redis", s.URL()}, args...), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("-tenant", "acme", "-type", "x", "-id", "s-1"); code != ExitOK || strings.TrimSpace(out) != "s-1" {
		t.Fatalf("enqueue: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := run("stats"); code != ExitOK || !strings.Contains(out, "depth        1 of 10") {
		t.Fatalf("stats: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := run("keys", "add", "-tenant", "acme"); code != ExitOK || !strings.HasPrefix(out, "slk_") {
		t.Fatalf("keys add: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// The wrong Sentinel password: a clear failure, no password shown.
	var out, errb bytes.Buffer
	bad := strings.Replace(s.URL(), "sen-pw", "nope", 1)
	code := Main(context.Background(), []string{"-policy", policy, "-redis", bad, "-tenant", "acme", "-type", "x"}, strings.NewReader(""), &out, &errb)
	if code != ExitFailure || strings.Contains(errb.String(), "srv-pw") || strings.Contains(errb.String(), "nope") {
		t.Fatalf("a wrong Sentinel password: exit %d, stderr %q", code, errb.String())
	}
	t.Logf("with a wrong Sentinel password: %s", strings.TrimSpace(errb.String()))
}

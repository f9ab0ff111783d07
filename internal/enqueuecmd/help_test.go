package enqueuecmd

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestHelpListsEveryFlag: -h prints every flag to stdout and exits 0, and
// a bad flag prints the same list to stderr with exit 2 (issue 20: -h
// listed none, so -redis and -wait could not be found).
func TestHelpListsEveryFlag(t *testing.T) {
	flags := []string{"redis", "redis-cluster", "redis-ca", "policy", "tenant", "type", "payload", "id",
		"downstream", "cost", "max-retry", "f", "wait", "max-wait", "q", "check"}
	for _, c := range []struct {
		args []string
		code int
	}{{[]string{"-h"}, ExitOK}, {[]string{"-no-such-flag"}, ExitUsage}} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), c.args, strings.NewReader(""), &stdout, &stderr)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d", c.args, code, c.code)
		}
		out := stdout.String()
		if c.code != ExitOK {
			out = stderr.String()
		}
		for _, f := range flags {
			if !regexp.MustCompile(`\n  -` + regexp.QuoteMeta(f) + `[ \t\n]`).MatchString(out) {
				t.Errorf("%v: the usage does not list -%s:\n%s", c.args, f, out)
			}
		}
	}
}

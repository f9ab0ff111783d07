package enqueuecmd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
)

// TestKeysCommands: enqueue keys add prints a key that authenticates as
// its tenants; list shows it without its secret; rotate replaces it;
// revoke ends it; mistakes exit 2 or 1 and say why.
func TestKeysCommands(t *testing.T) {
	c := newCLI(t, 10)
	opts, err := redis.ParseURL(c.redis)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	p, err := queue.NewProducer(client, &queue.Config{Queue: "cli", Bound: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auth := func(key string) (queue.APIKey, error) { return p.Keys().Authenticate(ctx, key) }

	code, out, errs := c.run("", "keys", "add", "-tenant", "acme", "-tenant", "beta, inc.")
	key := strings.TrimSpace(out)
	if code != ExitOK || !strings.HasPrefix(key, "slk_") || strings.Count(out, "\n") != 1 || !strings.Contains(errs, "shown this once") {
		t.Fatalf("add: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	ak, err := auth(key)
	if err != nil || len(ak.Tenants) != 2 || ak.Tenants[1] != "beta, inc." {
		t.Fatalf("the added key: %+v, %v", ak, err)
	}
	code, out, _ = c.run("", "keys", "list")
	if code != ExitOK || !strings.Contains(out, ak.ID) || !strings.Contains(out, `"acme","beta, inc."`) || strings.Contains(out, key[len("slk_"+ak.ID+"_"):]) {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	// Flags after the id.
	code, out, errs = c.run("", "keys", "rotate", ak.ID, "-policy", c.policy)
	fresh := strings.TrimSpace(out)
	if code != ExitOK || !strings.HasPrefix(fresh, "slk_"+ak.ID+"_") || fresh == key {
		t.Fatalf("rotate: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, err := auth(key); !errors.Is(err, queue.ErrBadKey) {
		t.Errorf("the rotated-out key: %v, want ErrBadKey", err)
	}
	if _, err := auth(fresh); err != nil {
		t.Errorf("the rotated-in key: %v", err)
	}
	if code, _, errs = c.run("", "keys", "revoke", ak.ID); code != ExitOK {
		t.Fatalf("revoke: exit %d, stderr %q", code, errs)
	}
	if _, err := auth(fresh); !errors.Is(err, queue.ErrBadKey) {
		t.Errorf("the revoked key: %v, want ErrBadKey", err)
	}
	for _, s := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"keys"}, ExitUsage, "give add, list, revoke or rotate"},
		{[]string{"keys", "add"}, ExitUsage, "add needs -tenant"},
		{[]string{"keys", "add", "-tenant", ""}, ExitUsage, "tenant is required"},
		{[]string{"keys", "revoke"}, ExitUsage, "takes one key id"},
		{[]string{"keys", "list", "-tenant", "a"}, ExitUsage, "-tenant is for add"},
		{[]string{"keys", "burn", "x"}, ExitUsage, `unknown command "burn"`},
		{[]string{"keys", "revoke", ak.ID}, ExitFailure, "no API key with that id"},
		{[]string{"keys", "rotate", "0000"}, ExitFailure, "no API key with that id"},
	} {
		code, out, errs := c.run("", s.args...)
		if code != s.code || out != "" || !strings.Contains(errs, s.says) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d saying %q", s.args, code, out, errs, s.code, s.says)
		}
	}
}

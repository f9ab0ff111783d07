package policy

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/queue"
)

// TestWithTypes: a policy that lists queue.types accepts, after
// WithTypes, the types added as well as its own, and the original is
// unchanged; a policy without the list is returned as it is; a bad type
// name is an error.
func TestWithTypes(t *testing.T) {
	cfg, err := Parse([]byte("queue:\n  name: q\n  bound: 10\n  types: [email.send]\n"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := cfg.WithTypes("contact.sync", "email.send")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg   *Config
		typ   string
		known bool
	}{
		{more, "contact.sync", true},
		{more, "email.send", true},
		{more, "other", false},
		{cfg, "contact.sync", false},
		{cfg, "email.send", true},
	} {
		err := c.cfg.CheckJob(&queue.Job{Tenant: "a", Type: c.typ})
		if known := err == nil; known != c.known || (!known && !errors.Is(err, ErrUnknownType)) {
			t.Errorf("%q: %v, want known %v", c.typ, err, c.known)
		}
	}
	if want := []string{"email.send", "sluice.http", "contact.sync"}; !slices.Equal(more.Queue.Types, want) {
		t.Errorf("types %q, want %q", more.Queue.Types, want)
	}
	open, err := Parse([]byte("queue:\n  bound: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := open.WithTypes("contact.sync"); got != open || err != nil {
		t.Errorf("a policy without queue.types: %p, %v; want itself", got, err)
	}
	if _, err := cfg.WithTypes("bad type"); err == nil {
		t.Error("a type with a space was accepted")
	}
}

package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestBacklogsLargestFirst: Backlogs lists the largest backlogs first,
// with each tenant's id as given, a long or unusual one too (its key name
// keeps only a hash), and with more tenants than it may look at it looks
// at no more than that.
func TestBacklogsLargestFirst(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 10000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		odd := "<b>" + strings.Repeat("x", 80) // hashed in key names
		backlog := map[string]int{"big": 5, odd: 4, "mid": 3, "small": 1}
		for i := range 40 {
			backlog[fmt.Sprintf("one-%02d", i)] = 1
		}
		for tenant, n := range backlog {
			for range n {
				if _, err := p.Enqueue(ctx, Job{Tenant: tenant, Type: "x"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		top, looked, err := p.Backlogs(ctx, 3, 1000)
		if err != nil {
			t.Fatal(err)
		}
		want := []Backlog{{"big", 5}, {odd, 4}, {"mid", 3}}
		if !slices.Equal(top, want) || looked != len(backlog) {
			t.Fatalf("Backlogs = %v (looked at %d), want %v of %d", top, looked, want, len(backlog))
		}
		top, looked, err = p.Backlogs(ctx, 50, 10)
		if err != nil || looked != 10 || len(top) != 10 {
			t.Fatalf("looking at 10 of %d: %d listed, looked at %d, %v", len(backlog), len(top), looked, err)
		}
		for _, b := range top {
			if b.Jobs != int64(backlog[b.Tenant]) {
				t.Fatalf("%q: %d jobs, want %d", b.Tenant, b.Jobs, backlog[b.Tenant])
			}
		}
	})
}

package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
)

// TestMarked: the throttle keys marked full now, furthest first, over
// every shard, with the tenants of per-tenant keys: a plain id as it is,
// a hashed one from its asleep reason when that name encodes as the
// mark's, else only its encoding; no mark that has ended; at most n.
func TestMarked(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		cfg.Shards = 3
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		long := strings.Repeat("a long tenant id ", 3)
		unknown := "another / hashed id"
		encLong, _ := keyspace.Encode(long)
		encUnknown, _ := keyspace.Encode(unknown)
		now := time.Now()
		mark := func(enc, member string, in time.Duration) {
			t.Helper()
			if err := client.ZAdd(ctx, p.shards.of(enc).full, redis.Z{Score: float64(now.Add(in).UnixMicro()), Member: member}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		mark("=acme", "api", 5*time.Second)
		mark("=acme", "feeds/=acme", time.Minute)
		mark(encLong, "feeds/"+encLong, 30*time.Second)
		mark(encUnknown, "feeds/"+encUnknown, 10*time.Second)
		mark("=old", "feeds/=old", -time.Second)
		if err := client.HSet(ctx, p.shards.of(encLong).why, encLong, sleepText(long, "slot: downstream feeds's next slot is beyond max_wait")).Err(); err != nil {
			t.Fatal(err)
		}
		// A claim's reason keeps the encoding as the name: not the id.
		if err := client.HSet(ctx, p.shards.of(encUnknown).why, encUnknown, encUnknown[1:]+"\tslot: its downstream is full or paused").Err(); err != nil {
			t.Fatal(err)
		}
		got, err := p.Marked(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, m := range got {
			b.WriteString(m.Downstream + "|" + m.Tenant + "|" + m.Encoded + " ")
		}
		want := "feeds|acme|=acme feeds|" + long + "|" + encLong + " feeds||" + encUnknown + " api|| "
		if b.String() != want {
			t.Fatalf("Marked:\n%s\nwant\n%s", b.String(), want)
		}
		if d := got[0].Until.Sub(now); d < 59*time.Second || d > time.Minute {
			t.Fatalf("acme's mark ends in %v; want a minute", d)
		}
		if two, err := p.Marked(ctx, 2); err != nil || len(two) != 2 || two[1].Tenant != long {
			t.Fatalf("Marked(2): %+v, %v; want acme's and the long id's", two, err)
		}
	})
}

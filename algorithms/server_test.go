package algorithms

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestKeysAlwaysHaveTTL: on the server's own clock, every key written has
// a TTL, and the TTL is no longer than the time until its state is
// equivalent to no state.
func TestKeysAlwaysHaveTTL(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		if tg.client == nil {
			t.Skip("no Redis keys in process")
		}
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				client := tg.client(t)
				// Long enough that no key may expire before it is read.
				p := Policy{Algorithm: alg, Limit: 5, Period: time.Minute}
				l := tg.new(t, p, nil).(*Redis)
				ctx := context.Background()
				for _, key := range []string{"a", "b", "a{", "}"} {
					for i := 0; i < 3; i++ {
						d, err := l.AllowN(ctx, key, 2)
						if err != nil {
							t.Fatal(err)
						}
						if i < 2 && !d.Allowed {
							t.Fatalf("call %d refused: %+v", i, d)
						}
					}
					k, _ := l.Key(key)
					ttl, err := client.PTTL(ctx, k).Result()
					if err != nil {
						t.Fatal(err)
					}
					// Windows live to the end of their window (the
					// sliding counter to the end of the next); buckets
					// until they are full again.
					most := 2 * p.Period
					if ttl <= 0 || ttl > most+ms || (alg == TokenBucket || alg == GCRA) && ttl > p.Period {
						t.Fatalf("key %q has TTL %v; want (0, %v]", k, ttl, most)
					}
				}
			})
		}
	})
}

// TestDecidedOnServerClock: with no Clock option, decisions follow the
// Redis server's TIME, not the host's clock. miniredis lets the test set
// the server's time far from the host's.
func TestDecidedOnServerClock(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	server := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC) // years from the host's clock
	m.SetTime(server)
	for _, alg := range Algorithms {
		l, err := NewRedis(client, Policy{Algorithm: alg, Limit: 1, Period: time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		m.SetTime(server)
		if d, _ := l.AllowN(ctx, "k", 1); !d.Allowed {
			t.Fatalf("%s: first call refused", alg)
		}
		// The sliding counter weighs the full window after this one.
		wait := time.Second
		if alg == SlidingWindowCounter {
			wait = 2 * time.Second
		}
		if d, _ := l.AllowN(ctx, "k", 1); d.Allowed || d.RetryAfter != wait {
			t.Fatalf("%s: second call at the same server time: %+v; want a %v wait", alg, d, wait)
		}
		m.SetTime(server.Add(wait - us))
		if d, _ := l.AllowN(ctx, "k", 1); d.Allowed {
			t.Fatalf("%s: admitted a server microsecond early", alg)
		}
		m.SetTime(server.Add(wait))
		if d, _ := l.AllowN(ctx, "k", 1); !d.Allowed {
			t.Fatalf("%s: refused %v of server time later", alg, wait)
		}
	}
}

// TestStateFormat: the constant-size algorithms keep one string of
// integers per key, and Reset deletes it.
func TestStateFormat(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		if tg.client == nil {
			t.Skip("no Redis keys in process")
		}
		for _, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				client := tg.client(t)
				ctx := context.Background()
				// A period of whole µs that 3 does not divide: the GCRA's
				// TAT then has a fraction (stored as "a:f").
				p := Policy{Algorithm: alg, Limit: 3, Period: time.Minute + time.Microsecond}
				l := tg.new(t, p, nil).(*Redis)
				k, err := l.Key("tenant")
				if err != nil {
					t.Fatal(err)
				}
				if alg == SlidingWindowLog {
					return // a sorted set
				}
				// Integers per state: the GCRA's TAT is "a:f", or "a" when
				// f is 0 (after the third call here).
				fields := map[Algorithm][]int{FixedWindow: {2, 2, 2}, SlidingWindowCounter: {3, 3, 3}, TokenBucket: {2, 2, 2}, GCRA: {2, 2, 1}}[alg]
				// A window algorithm whose window ends during the calls
				// (its key expires with the window) starts again: the
				// calls are a few ms, the window a minute.
				calls := func() (rolled bool) {
					for i := int64(0); i < 3; i++ {
						d, err := l.AllowN(ctx, "tenant", 1)
						if err != nil {
							t.Fatal(err)
						}
						if (alg == FixedWindow || alg == SlidingWindowCounter) && d.ResetAfter < time.Second {
							return true
						}
						if !d.Allowed || d.Remaining != 2-i {
							t.Fatalf("call %d: %+v; want admitted, %d remaining", i, d, 2-i)
						}
						if typ, _ := client.Type(ctx, k).Result(); typ != "string" {
							t.Fatalf("state key %q is a %s; want a string", k, typ)
						}
						v, err := client.Get(ctx, k).Result()
						if err != nil {
							t.Fatal(err)
						}
						parts := strings.Split(v, ":")
						if len(parts) != fields[i] {
							t.Fatalf("call %d: state %q; want %d integers", i, v, fields[i])
						}
						for _, s := range parts {
							if _, err := strconv.ParseInt(s, 10, 64); err != nil {
								t.Fatalf("call %d: state %q: %v", i, v, err)
							}
						}
					}
					return false
				}
				for attempt := 0; calls(); attempt++ {
					if attempt == 2 {
						t.Fatal("the window ended during the calls three times")
					}
					if err := l.Reset(ctx, "tenant"); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Second) // past the window's end
				}
				if d, _ := l.PeekN(ctx, "tenant", 1); d.Allowed {
					t.Fatalf("peek after the limit: %+v", d)
				}
				if err := l.Reset(ctx, "tenant"); err != nil {
					t.Fatal(err)
				}
				if n, _ := client.Exists(ctx, k).Result(); n != 0 {
					t.Fatalf("Reset left %q", k)
				}
			})
		}
	})
}

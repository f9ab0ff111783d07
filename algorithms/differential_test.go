package algorithms

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDifferential runs random timelines through the in-process model and
// a Redis implementation side by side, on the same simulated clock, and
// requires identical decisions at every step: the scripts do the model's
// arithmetic. Timelines include bursts, long idle spells, several keys,
// peeks and a clock that sometimes steps back.
func TestDifferential(t *testing.T) {
	steps := map[string]int{"miniredis": 600, "redis-standalone": 500, "redis-cluster": 300}
	forEachTarget(t, func(t *testing.T, tg target) {
		if tg.client == nil {
			t.Skip("the reference itself")
		}
		for ai, alg := range Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ai), 42))
				for _, p := range randomPolicies(alg, rng, 4) {
					differential(t, tg, p, rng, steps[tg.name])
				}
			})
		}
	})
}

func differential(t *testing.T, tg target, p Policy, rng *rand.Rand, steps int) {
	t.Helper()
	clock := newClock()
	local, err := NewLocal(p, &LocalOptions{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	remote := tg.new(t, p, clock.Now)
	ctx := context.Background()
	keys := []string{"a", "b{x}", "c:d"}
	var at int64
	for i := 0; i < steps; i++ {
		at += nextGap(rng, p)
		clock.Set(base.Add(time.Duration(at) * us))
		key := keys[rng.IntN(len(keys))]
		n := int64(1)
		if rng.IntN(3) == 0 {
			n = 1 + rng.Int64N(p.Capacity())
		}
		call := Limiter.AllowN
		if rng.IntN(10) == 0 {
			call = Limiter.PeekN
		}
		want, err := call(local, ctx, key, n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := call(remote, ctx, key, n)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s step %d (at %dµs, key %q, cost %d):\nredis %+v\nmodel %+v", p, i, at, key, n, got, want)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// stalls summarises a probe: how late a 10 ms sleep woke (a process that
// was not scheduled, or a stop of the world), or how long a PING took.
type stalls struct {
	Max   time.Duration
	Over  int           // samples more than stallThreshold late (or long)
	Total time.Duration // time lost in those samples, beyond the threshold
}

const (
	probeEvery     = 10 * time.Millisecond
	stallThreshold = 10 * time.Millisecond // as long as the downstream's tolerance
)

func (s *stalls) add(d time.Duration) {
	s.Max = max(s.Max, d)
	if d > stallThreshold {
		s.Over++
		s.Total += d - stallThreshold
	}
}

func (s stalls) String() string {
	if s.Over == 0 {
		return short(s.Max)
	}
	return fmt.Sprintf("%s (%d over %v, %s lost)", short(s.Max), s.Over, stallThreshold, short(s.Total))
}

// probeSleep sleeps probeEvery again and again from now until to,
// measuring how late each sleep ends: a stall of this process.
func probeSleep(to time.Time) stalls {
	var s stalls
	for time.Now().Before(to) {
		t := time.Now()
		time.Sleep(probeEvery)
		s.add(time.Since(t) - probeEvery)
	}
	return s
}

// probeRedis PINGs every probeEvery until to, measuring each round trip:
// a stall of redis-server (or of this process). Its PINGs are taken out of
// the server's command count.
func probeRedis(ctx context.Context, rdb *redis.Client, to time.Time) stalls {
	var s stalls
	for time.Now().Before(to) && ctx.Err() == nil {
		t := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return s
		}
		s.add(time.Since(t))
		sleepCtx(ctx, probeEvery)
	}
	return s
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestNotReplicatedIsStored: under Replicas, a Redis without replicas
// answers a *NotReplicatedError after ReplicaTimeout; the job is stored
// (the same id again is a duplicate); refusals are the usual errors.
func TestNotReplicatedIsStored(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 2)
		cfg.Replicas, cfg.ReplicaTimeout = 1, 20*time.Millisecond
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		job := Job{Tenant: "acme", Type: "x", ID: "order-1"}
		_, err = p.Enqueue(ctx, job)
		var nr *NotReplicatedError
		if !errors.As(err, &nr) || !errors.Is(err, ErrNotReplicated) || nr.ID != "order-1" || nr.Want != 1 || nr.Got != 0 {
			t.Fatalf("no replica: %v, want a *NotReplicatedError for order-1, 0 of 1", err)
		}
		if _, err := p.Enqueue(ctx, job); !errors.Is(err, ErrDuplicateJob) {
			t.Fatalf("order-1 again: %v, want a duplicate (it is stored)", err)
		}
		if _, err := p.Enqueue(ctx, Job{Tenant: "acme", Type: "x"}); !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("the second job: %v, want ErrNotReplicated", err)
		}
		if _, err := p.Enqueue(ctx, Job{Tenant: "acme", Type: "x"}); !errors.Is(err, ErrQueueFull) || errors.Is(err, ErrNotReplicated) {
			t.Fatalf("a full queue: %v, want ErrQueueFull alone", err)
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 2 {
			t.Fatalf("depth %d (%v), want 2", st.Depth, err)
		}
	})
}

// TestReplicatedEnqueueSurvivesFailover: producers enqueue under
// Replicas 1 while the Sentinel primary is SIGKILLed; every job whose
// Enqueue succeeded is on the promoted replica.
func TestReplicatedEnqueueSurvivesFailover(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelConfig{})
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: s.SentinelAddrs()})
	defer client.Close()
	cfg := Config{Queue: "replicated", Bound: 1 << 20, Replicas: 1, ReplicaTimeout: 500 * time.Millisecond}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var accepted []Job
	notReplicated := 0
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				job := Job{Tenant: fmt.Sprintf("t%d", g), Type: "x", ID: fmt.Sprintf("j%d", i)}
				_, err := p.Enqueue(ctx, job)
				mu.Lock()
				switch {
				case err == nil:
					accepted = append(accepted, job)
				case errors.Is(err, ErrNotReplicated):
					notReplicated++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count() < 300 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d jobs accepted in 30 s", count())
		}
		time.Sleep(5 * time.Millisecond)
	}
	old := s.Servers()[0]
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	atKill := count()
	s.Primary(t, old)
	time.Sleep(500 * time.Millisecond) // producers meet the new primary
	stop()
	wg.Wait()

	// Each accepted job is on the new primary: the same id again is a
	// duplicate (no worker has taken any).
	check, err := NewProducer(client, &Config{Queue: "replicated", Bound: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, job := range accepted {
		for try := 0; ; try++ {
			_, err := check.Enqueue(context.Background(), job)
			if errors.Is(err, ErrDuplicateJob) {
				break
			}
			if err == nil {
				lost++
				break
			}
			if try == 100 {
				t.Fatalf("checking %s: %v", job.ID, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d accepted jobs were not on the promoted replica", lost, len(accepted))
	}
	t.Logf("%d accepted (%d when the primary was killed), none lost; %d answered not replicated (the promoted primary has no replica)", len(accepted), atKill, notReplicated)
}

// TestNotReplicatedOverHTTP: POST /enqueue answers 503 "not_replicated"
// with the job's id.
func TestNotReplicatedOverHTTP(t *testing.T) {
	cfg := testConfig(t, 10)
	cfg.Replicas, cfg.ReplicaTimeout = 1, 10*time.Millisecond
	p, err := NewProducer(redistest.Mini(t), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, resp := keyPost(t, HTTPHandler(p), "192.0.2.9:1", "", `{"tenant":"a","type":"x","id":"o-1"}`)
	if w.Code != 503 || resp.Reason != "not_replicated" || resp.ID != "o-1" {
		t.Fatalf("%d %+v, want 503 not_replicated for o-1", w.Code, resp)
	}
}

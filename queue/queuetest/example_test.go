package queuetest_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/queuetest"
)

// A test of a handler that welcomes a new user: it runs the handler on a
// signup job as a worker would, then checks what the handler enqueued.
// In a test, t.Fatal where this example panics.
func Example() {
	q, err := queuetest.New(nil) // an in-process miniredis of its own
	if err != nil {
		panic(err)
	}
	defer q.Close()

	// The code under test enqueues on the queue's Producer.
	signup := queue.HandlerFunc(func(ctx context.Context, job *queue.Job) error {
		_, err := q.Producer.Enqueue(ctx, queue.Job{Tenant: job.Tenant, Type: "email.welcome", Payload: job.Payload})
		return err
	})

	ctx := context.Background()
	run, err := q.Work(ctx, signup, queue.Job{Tenant: "acme", Type: "user.signup", Payload: []byte("ada@example.com")})
	if err != nil {
		panic(err)
	}
	fmt.Println("the handler returned:", run.Err)

	waiting, err := q.Waiting(ctx, "acme")
	if err != nil {
		panic(err)
	}
	for _, j := range waiting {
		fmt.Printf("waiting: %s %s\n", j.Type, j.Payload)
	}
	// Output:
	// the handler returned: <nil>
	// waiting: email.welcome ada@example.com
}

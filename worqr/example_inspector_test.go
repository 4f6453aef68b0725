package worqr_test

import (
	"context"
	"fmt"
	"os"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// An Inspector lists every queue with its counts, including queues that
// were only enqueued to, and pauses one.
func ExampleInspector() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-inspector"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if _, err := client.EnqueueBatch(ctx, "reports", [][]byte{[]byte("q1"), []byte("q2")}, nil); err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if err := in.Pause(ctx, "reports"); err != nil {
		panic(err)
	}
	queues, err := in.Queues(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range queues {
		fmt.Printf("%s waiting=%d active=%d dead=%d paused=%t\n", q.Name, q.Waiting, q.Active, q.Dead, q.Paused)
	}
	n, err := in.DeleteAllWaiting(ctx, "reports", nil)
	fmt.Println("deleted", n, err)
	// Output:
	// reports waiting=2 active=0 dead=0 paused=true
	// deleted 2 <nil>
}

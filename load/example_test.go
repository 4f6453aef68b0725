package load_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/worqr/worqr-go/load"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// Run enqueues one task per line of a reader, in atomic chunks with a
// checkpoint in Redis: a load that stopped half way resumes (Resume) without
// enqueueing a line twice.
func ExampleRun() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-load"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	input := strings.NewReader(`{"user":1}
{"user":2}

{"user":3}
`)
	p, err := load.Run(ctx, client, "imports", input, &load.Options{Name: "users-2024", Format: load.JSONLines})
	if err != nil {
		panic(err)
	}
	fmt.Printf("lines=%d enqueued=%d blank=%d\n", p.Lines, p.Enqueued, p.Empty)
	q, err := in.Queue(ctx, "imports")
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Waiting, "waiting")
	// Output:
	// lines=4 enqueued=3 blank=1
	// 3 waiting
}

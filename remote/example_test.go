package remote_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// A remote worker (what the gateway serves over the network): open a
// session, take, and end the taking by its pid. The remote must call Beat
// at least every SessionTTL/3 while it works.
func ExampleServer() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-remote"}
	client, _ := worqr.NewClient(pool, &cfg)
	server, err := remote.NewServer(pool, &remote.Config{Config: cfg, AnyQueue: true})
	if err != nil {
		panic(err)
	}
	if err := server.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = server.Stop(stopCtx)
	}()
	if _, err := client.Enqueue(ctx, "pdf", []byte("report.md"), nil); err != nil {
		panic(err)
	}

	s, err := server.Open(ctx, remote.OpenOpts{Name: "converter-1", Queues: []string{"pdf"}})
	if err != nil {
		panic(err)
	}
	takings, err := s.Take(ctx, remote.TakeRequest{Queue: "pdf", Max: 10, Wait: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, t := range takings {
		fmt.Println("took", string(t.Payload))
		out, err := s.Finish(ctx, t.PID, []byte("report.pdf"))
		fmt.Println(out, err)
	}
	fmt.Println(s.Close(ctx))
	// Output:
	// took report.md
	// done <nil>
	// <nil>
}

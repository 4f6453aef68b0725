package consumer_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// entryLog is a Source: an append-only list of entries, found by their index.
type entryLog struct{ entries []string }

func (l *entryLog) Head(context.Context) (uint64, error) {
	if len(l.entries) == 0 {
		return 0, consumer.ErrNotFound
	}
	return uint64(len(l.entries) - 1), nil
}

func (l *entryLog) AtIndex(_ context.Context, i uint64) (string, error) {
	if i >= uint64(len(l.entries)) {
		return "", consumer.ErrNotFound
	}
	return l.entries[i], nil
}

// A consumer works the entries of a log in index order, several at once,
// and keeps its processed index in Redis: every entry below it is done, and
// a restart resumes from it.
func ExampleNew() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	source := &entryLog{entries: []string{"create a", "update a", "create b", "delete a"}}

	processed := make(chan uint64, len(source.entries))
	c, err := consumer.New(pool, &consumer.Config[string]{
		Name:           "audit",
		Source:         source,
		MaxProcessing:  2, // jobs in flight, across every process
		MaxSearchAhead: 8, // never further than 8 past the processed index
		Process: func(ctx context.Context, i uint64, entry string) error {
			return nil // index entry i (idempotent: it may run again)
		},
		OnProcessed: func(p uint64) { processed <- p },
		Worker:      worqr.WorkerConfig{Config: worqr.Config{Namespace: "example-consumer"}},
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	for p := uint64(0); p < 4; p = <-processed {
	}
	p, err := c.Progress(ctx)
	fmt.Printf("processed=%d next=%d in flight=%d %v\n", p.Processed, p.Next, p.InFlight(), err)

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println(c.Stop(stopCtx))
	// Output:
	// processed=4 next=4 in flight=0 <nil>
	// <nil>
}

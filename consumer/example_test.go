package consumer_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/xid"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// chain is a source of blocks: block i exists once the chain is i+1 long.
type chain struct{ height uint64 }

func (c *chain) Head(context.Context) (uint64, error) { return c.height - 1, nil }
func (c *chain) AtIndex(_ context.Context, i uint64) (string, error) {
	return fmt.Sprintf("block-%d", i), nil
}

// chunks is where the first consumer puts the jobs of the second: an
// indexed store that records each block's chunks once, however many times
// the block is processed (a real one would be a database).
type chunks struct {
	mu    sync.Mutex
	seen  map[string]bool
	items []string
}

func (s *chunks) add(block string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[block] {
		return // the block ran again: its chunks are in already
	}
	s.seen[block] = true
	for k := 0; k < n; k++ {
		s.items = append(s.items, fmt.Sprintf("%s/chunk-%d", block, k))
	}
}

func (s *chunks) Head(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 {
		return 0, consumer.ErrNotFound
	}
	return uint64(len(s.items) - 1), nil
}

func (s *chunks) AtIndex(_ context.Context, i uint64) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= uint64(len(s.items)) {
		return "", consumer.ErrNotFound
	}
	return s.items[i], nil
}

// A pipeline of two consumers (flow-go's pipeline pattern): the first works
// each block and creates a job per chunk of it; the second verifies every
// chunk. Each consumer keeps its own processed index in Redis.
func Example_pipeline() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	settings := worqr.WorkerConfig{Config: worqr.Config{Namespace: "example-" + xid.New().String()}}

	store := &chunks{seen: map[string]bool{}}
	var mu sync.Mutex
	verified := 0
	// OnProcessed tells each consumer's processed index as it moves on:
	// the example ends once both are through.
	blocksDone, chunksDone := make(chan struct{}), make(chan struct{})
	second, err := consumer.New(pool, &consumer.Config[string]{
		Name: "chunks", Source: store, MaxProcessing: 8, Worker: settings,
		Process: func(ctx context.Context, i uint64, chunk string) error {
			mu.Lock()
			verified++
			mu.Unlock()
			return nil
		},
		OnProcessed: func(processed uint64) {
			if processed == 9 { // blocks 0 to 9 have 9 chunks
				close(chunksDone)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	first, err := consumer.New(pool, &consumer.Config[string]{
		Name: "blocks", Source: &chain{height: 10}, MaxProcessing: 4, Worker: settings,
		Process: func(ctx context.Context, i uint64, block string) error {
			store.add(block, int(i%3)) // block i has i%3 chunks
			second.Check()             // new jobs for the second consumer
			return nil
		},
		OnProcessed: func(processed uint64) {
			if processed == 10 {
				close(blocksDone)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	for _, c := range []*consumer.Consumer[string]{second, first} {
		if err := c.Start(ctx); err != nil {
			panic(err)
		}
	}
	<-blocksDone
	<-chunksDone
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println(first.Stop(stopCtx), second.Stop(stopCtx))
	fmt.Println("blocks processed:", 10)
	mu.Lock()
	fmt.Println("chunks verified:", verified)
	mu.Unlock()
	// Output:
	// <nil> <nil>
	// blocks processed: 10
	// chunks verified: 9
}

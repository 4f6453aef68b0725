package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

const statsHead = `Usage: worqr-example stats [flags]

Prints, for each queue, how many tasks wait and how many are held by workers,
then the registered workers and whether their keepalive is still there (a dead
one is listed until a peer's reaper forgets it):
  queue <name> waiting <n> active <n>
  workers <n>
  worker <worker_id> alive|dead
Without --queues, every queue a worker of the namespace ever served is shown.
`

func runStats(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("stats")
	var c common
	c.register(fs, io.getenv, true)
	queueList := fs.String("queues", "", "comma-separated queues to show (default: every known queue)")
	if err := parse(fs, args, io.out, statsHead, "\nEnvironment:\n"+envHelp(true, false)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	var queues []string
	if *queueList != "" {
		var err error
		if queues, err = parseQueues("--queues", *queueList); err != nil {
			return err
		}
	}
	cn, err := c.connect(ctx, io)
	if err != nil {
		return err
	}
	defer cn.close()
	pool, client := cn.pool, cn.client
	keys := rdb.NewKeys(c.namespace)
	reg := registry.New(pool, keys)
	if queues == nil {
		known, err := reg.KnownQueues(ctx)
		if err != nil {
			return fmt.Errorf("known queues: %w", err)
		}
		for _, q := range known {
			queues = append(queues, q.Name)
		}
		sort.Strings(queues)
	}
	out := &lineWriter{w: io.out}
	for _, q := range queues {
		waiting, err := client.Len(ctx, q)
		if err != nil {
			return fmt.Errorf("length of %s: %w", q, err)
		}
		active, err := activeTakings(ctx, pool, keys.Queue(rdb.Standalone(q)))
		if err != nil {
			return fmt.Errorf("takings of %s: %w", q, err)
		}
		if err := out.line("queue", q, "waiting", strconv.Itoa(waiting), "active", strconv.Itoa(active)); err != nil {
			return err
		}
	}
	workers, err := reg.Workers(ctx)
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	sort.Strings(workers)
	alive, err := reg.Alive(ctx, workers)
	if err != nil {
		return fmt.Errorf("keepalives: %w", err)
	}
	if err := out.line("workers", strconv.Itoa(len(workers))); err != nil {
		return err
	}
	for i, w := range workers {
		state := "dead"
		if alive[i] {
			state = "alive"
		}
		if err := out.line("worker", w, state); err != nil {
			return err
		}
	}
	return nil
}

// activeTakings counts the takings of a queue: the pids held by every worker
// in the queue's holder index.
func activeTakings(ctx context.Context, pool *redis.Pool, qk rdb.QueueKeys) (int, error) {
	c, err := pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	holders, err := redis.Strings(redis.DoContext(c, ctx, "SMEMBERS", qk.Holders))
	if err != nil || len(holders) == 0 {
		return 0, err
	}
	for _, w := range holders {
		if err := c.Send("SCARD", qk.WorkerQueue(w)); err != nil {
			return 0, err
		}
	}
	if err := c.Flush(); err != nil {
		return 0, err
	}
	n := 0
	for range holders {
		k, err := redis.Int(redis.ReceiveContext(c, ctx))
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

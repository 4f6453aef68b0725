package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/worqr"
)

const enqueueHead = `Usage: worqr-example enqueue [flags]

Enqueues --count tasks with the same payload at the back of --queue, one by one
or, with --batch, in one atomic step. With --key, the tasks belong to that key
(an ordered queue: the tasks of one key run one at a time, in enqueue order).
Prints one line per task on stdout:
  enqueued <queue> <task_id>
`

func runEnqueue(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("enqueue")
	var c common
	c.register(fs, io.getenv, true)
	queue := fs.String("queue", "default", "queue to enqueue on")
	count := fs.Int("count", 1, "number of tasks (at least 1)")
	payload := fs.String("payload", "", "payload of every task (opaque bytes)")
	batch := fs.Bool("batch", false, "enqueue all tasks in one atomic step (all or none)")
	key := fs.String("key", "", "enqueue with this key: tasks of one key run one at a time, in order (default: none)")
	if err := parse(fs, args, io.out, enqueueHead, "\nEnvironment:\n"+envHelp(true, false)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	if err := worqr.CheckQueueName(*queue); err != nil {
		return usagef("--queue: queue name %s", ruleOf(err))
	}
	if *count < 1 {
		return usagef("--count (%d) must be at least 1", *count)
	}
	if len(*key) > defaults.MaxKeyLen {
		return usagef("--key is %d bytes long (at most %d)", len(*key), defaults.MaxKeyLen)
	}
	var opts *worqr.EnqueueOpts
	if *key != "" {
		opts = &worqr.EnqueueOpts{Key: *key}
	}
	cn, err := c.connect(ctx, io)
	if err != nil {
		return err
	}
	defer cn.close()
	client := cn.client
	out := &lineWriter{w: io.out}
	if *batch {
		payloads := make([][]byte, *count)
		for i := range payloads {
			payloads[i] = []byte(*payload)
		}
		// The ids come with a *BatchError (those enqueued) and with
		// ErrNotReplicated (all of them): print them before the error.
		ids, err := client.EnqueueBatch(ctx, *queue, payloads, opts)
		for _, id := range ids {
			if err := out.line("enqueued", *queue, id); err != nil {
				return err
			}
		}
		return notReplicated(err)
	}
	for i := 0; i < *count; i++ {
		id, err := client.Enqueue(ctx, *queue, []byte(*payload), opts)
		if id != "" {
			if err := out.line("enqueued", *queue, id); err != nil {
				return err
			}
		}
		if err != nil {
			return notReplicated(err)
		}
	}
	return nil
}

// notReplicated says of an ErrNotReplicated that the task is enqueued on
// the primary (its line was printed) though too few replicas confirmed it;
// other errors are returned as they are.
func notReplicated(err error) error {
	if errors.Is(err, worqr.ErrNotReplicated) {
		return fmt.Errorf("enqueued on the primary, but not confirmed by the replicas %s asks for (lost if the primary fails now): %w", envReplicas, err)
	}
	return err
}

package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/worqr/worqr-go/worqr"
)

// Workload i (ordered): -n jobs spread evenly over 1,000 keys, then over 10
// keys, of an ordered queue (EnqueueOpts.Key), drained by one worker of the
// first -concurrency, against the same drain of a plain queue. Like h, it
// runs only when named, and is worqr's alone (asynq has no ordered queues).
// With 10 keys at most 10 tasks run at once whatever the concurrency: one
// per key.

// orderedKeys are the key counts of workload i; 0 is the plain queue.
var orderedKeys = []int{0, 1000, 10}

func orderedLabel(keys int) string {
	if keys == 0 {
		return "plain queue"
	}
	return fmt.Sprintf("%s keys", thousands(int64(keys)))
}

func orderedNote(o *options) string {
	return fmt.Sprintf("i. ordered: %d jobs of an ordered queue, spread evenly over the keys, drained by one worker of concurrency %d "+
		"(one task per key runs at a time), against the same drain of a plain queue", o.n, o.concurrency)
}

// ordered runs workload i once.
func (b *bench) ordered(ctx context.Context) error {
	o := b.o
	for _, keys := range orderedKeys {
		ns, err := b.fresh(ctx)
		if err != nil {
			return err
		}
		client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
		if err != nil {
			return err
		}
		if keys == 0 {
			for i := 0; i < o.n; i += batchSize {
				if _, err := client.EnqueueBatch(ctx, benchQueue, repeat(b.payload, min(batchSize, o.n-i)), nil); err != nil {
					return err
				}
			}
		} else {
			for k := range keys {
				per := o.n/keys + btoi(k < o.n%keys)
				if per == 0 {
					continue
				}
				opts := &worqr.EnqueueOpts{Key: fmt.Sprintf("key-%d", k)}
				if _, err := client.EnqueueBatch(ctx, benchQueue, repeat(b.payload, per), opts); err != nil {
					return err
				}
			}
		}
		runtime.GC()
		s0, err := b.snap(ctx)
		if err != nil {
			return err
		}
		elapsed, s1, err := b.drainInProcess(ctx, ns, o.concurrency, false)
		if err != nil {
			return fmt.Errorf("%s: %w", orderedLabel(keys), err)
		}
		n := float64(o.n)
		perJob := float64(totalCalls(cmdDelta(s0, s1))) / n
		b.rep.add(fmt.Sprintf("ordered_%d_jobs_per_s", keys), n/elapsed.Seconds())
		b.rep.add(fmt.Sprintf("ordered_%d_cmds_per_job", keys), perJob)
		b.rep.add(fmt.Sprintf("ordered_%d_redis_cpu_us_per_job", keys), (s1.redisCPU-s0.redisCPU)*1e6/n)
		b.progress("ordered drain, %s: %.0f jobs/s, %.2f commands/job, redis CPU %.1f µs/job",
			orderedLabel(keys), n/elapsed.Seconds(), perJob, (s1.redisCPU-s0.redisCPU)*1e6/n)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orderedRows are the lines of workload i.
func orderedRows(jobs, f2, f1 func(float64) string) []row {
	var out []row
	for _, keys := range orderedKeys {
		l := orderedLabel(keys)
		out = append(out,
			row{key: fmt.Sprintf("ordered_%d_jobs_per_s", keys), label: "i. ordered drain, " + l + " (jobs/s)", higher: true, format: jobs},
			row{key: fmt.Sprintf("ordered_%d_cmds_per_job", keys), label: "i. ordered drain, " + l + ": Redis commands per job", format: f2},
			row{key: fmt.Sprintf("ordered_%d_redis_cpu_us_per_job", keys), label: "i. ordered drain, " + l + ": Redis CPU per job (µs)", format: f1})
	}
	return out
}

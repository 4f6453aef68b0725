package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/worqr/worqr-go/load"
	"github.com/worqr/worqr-go/worqr"
)

// Workload l (load): load.Run of -load-n generated lines of -payload
// bytes into a fresh queue with no worker (the rate, and Redis's memory
// holding them all), then of -load-drain-n lines with MaxWaiting
// -load-max-waiting while a worker drains the queue (memory stays bounded;
// the rate is then the drain's). The harness is workload h's.

func loadNote(o *options) string {
	return fmt.Sprintf("l. load: load.Run of %d lines of %d B generated in memory (no disk), chunks of %d, %d on the wire; "+
		"then %d lines with MaxWaiting %d while a worker (concurrency 50, no-op handler) drains the queue; "+
		"same live worker and prober as h; Redis time per call from the last %d commands in SLOWLOG, the longest command of all from the latency monitor (1 ms resolution); "+
		"Redis memory: the peak used_memory (sampled every %s) over the first sample",
		o.loadN, o.payload, load.DefaultChunk, load.DefaultWindow, o.loadDrainN, o.loadMaxWait, loadSlowlog, memoryEvery)
}

// loadSlowlog is how many commands SLOWLOG keeps during a load: few, so
// that its memory stays out of the measured peak.
const loadSlowlog = 1 << 16

// load runs workload l once.
func (b *bench) load(ctx context.Context) error {
	o := b.o
	err := b.measureBulk(ctx, false, bulkRun{
		key: "load", script: "load", n: o.loadN, what: "l. load, no worker", waiting: o.loadN, slowlog: loadSlowlog,
		op: func(ctx context.Context, client *worqr.Client, _ string) error {
			p, err := load.Run(ctx, client, bulkQueue, newLines(o.loadN, o.payload), &load.Options{Name: "bench"})
			if err == nil && p.Enqueued != int64(o.loadN) {
				err = fmt.Errorf("%d tasks enqueued from %d lines", p.Enqueued, o.loadN)
			}
			return err
		},
	})
	if err != nil {
		return err
	}
	return b.measureBulk(ctx, false, bulkRun{
		key: "loadmw", script: "load", n: o.loadDrainN, what: "l. load with MaxWaiting, drained", waiting: 0, slowlog: loadSlowlog,
		op: func(ctx context.Context, client *worqr.Client, ns string) error {
			w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
				Config: b.config(ns),
				Queues: map[string]worqr.QueueConfig{bulkQueue: {Concurrency: 50, Handler: noop}},
			})
			if err != nil {
				return err
			}
			if err := w.Start(ctx); err != nil {
				return err
			}
			defer stopWorker(w)
			in, err := worqr.NewInspector(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
			if err != nil {
				return err
			}
			p, err := load.Run(ctx, client, bulkQueue, newLines(o.loadDrainN, o.payload),
				&load.Options{Name: "bench-held", MaxWaiting: o.loadMaxWait})
			if err != nil {
				return err
			}
			if p.Enqueued != int64(o.loadDrainN) {
				return fmt.Errorf("%d tasks enqueued from %d lines", p.Enqueued, o.loadDrainN)
			}
			for {
				qi, err := in.Queue(ctx, bulkQueue)
				if err != nil || qi.Waiting == 0 {
					return err
				}
				if !sleepCtx(ctx, 20*time.Millisecond) {
					return ctx.Err()
				}
			}
		},
	})
}

// lines generates n distinct lines of size bytes (the line number, padded
// with zeros), newline-terminated.
type lines struct {
	n, i, size int
	buf        []byte
	off        int
}

func newLines(n, size int) io.Reader { return &lines{n: n, size: max(size, 12)} }

func (l *lines) Read(p []byte) (int, error) {
	if l.off == len(l.buf) {
		if l.i == l.n {
			return 0, io.EOF
		}
		l.buf, l.off = l.buf[:0], 0
		for k := 0; k < 1024 && l.i < l.n; k++ {
			l.i++
			num := strconv.Itoa(l.i)
			for j := len(num); j < l.size; j++ {
				l.buf = append(l.buf, '0')
			}
			l.buf = append(l.buf, num...)
			l.buf = append(l.buf, '\n')
		}
	}
	n := copy(p, l.buf[l.off:])
	l.off += n
	return n, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/worqr"
)

const consumerHead = `Usage: worqr-example consumer [flags]

Runs a pipeline of two indexed consumers (package consumer, after flow-go's
jobqueue) until SIGINT or SIGTERM:

  <name>.blocks  works block i of a made-up chain that grows by one block
                 every --block-interval from --chain-start, up to --blocks;
                 block i has i%4 chunks, which exist once the block is
                 processed;
  <name>.chunks  works every chunk, in order: its source's head is read from
                 the first consumer's processed index (kept in Redis).

Each job sleeps --work-time. Run it in several processes with the same
--name and namespace: they share both consumers' jobs, at most
--max-processing in flight per consumer across all of them; kill one (even
with kill -9) and the jobs it held run again elsewhere within seconds, while
the processed indexes never skip a job. A restart resumes from the stored
indexes. With --exit-when-done it exits 0 once every block of a --blocks
long chain and every chunk is done.

Stdout carries a first line once both consumers are registered, then one
line per job done (a job cut by a crash may run, and print, again):
  started <blocks worker id> <chunks worker id>
  block <index>
  chunk <index> <block> <k>               (the k-th chunk of the block)
  processed <consumer> <processed index>  (a record here moved the index)
`

// chunksBefore is the number of chunks of the blocks below b (block i has
// i%4 chunks: 6 per 4 blocks).
func chunksBefore(b uint64) uint64 { return 6*(b/4) + [4]uint64{0, 0, 1, 3}[b%4] }

// chunkAt returns the block and rank of chunk c.
func chunkAt(c uint64) (block, k uint64) {
	b := uint64(sort.Search(int(2*c+8), func(b int) bool { return chunksBefore(uint64(b)+1) > c }))
	return b, c - chunksBefore(b)
}

// blockChain is the first consumer's source: a chain whose height grows
// with time since start.
type blockChain struct {
	start    time.Time
	interval time.Duration
	max      uint64 // 0: no end
}

func (s *blockChain) height() uint64 {
	h := uint64(max(time.Since(s.start), 0)/s.interval) + 1
	if s.max > 0 {
		h = min(h, s.max)
	}
	return h
}

func (s *blockChain) Head(context.Context) (uint64, error) { return s.height() - 1, nil }
func (s *blockChain) AtIndex(_ context.Context, i uint64) (uint64, error) {
	if i >= s.height() {
		return 0, consumer.ErrNotFound
	}
	return i, nil
}

// chunkSource is the second consumer's source: the chunks of the blocks
// the first consumer has processed.
type chunkSource struct{ blocks *consumer.Consumer[uint64] }

func (s *chunkSource) Head(ctx context.Context) (uint64, error) {
	p, err := s.blocks.ProcessedIndex(ctx)
	if err != nil {
		return 0, err
	}
	if n := chunksBefore(p); n > 0 {
		return n - 1, nil
	}
	return 0, consumer.ErrNotFound
}

func (s *chunkSource) AtIndex(_ context.Context, c uint64) (uint64, error) { return c, nil }

func runConsumer(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("consumer")
	var c common
	c.register(fs, io.getenv, true)
	name := fs.String("name", "example", "the pipeline's name: its consumers are <name>.blocks and <name>.chunks")
	blocks := fs.Uint64("blocks", 100, "the chain's length (0: it grows for ever)")
	interval := fs.Duration("block-interval", 100*time.Millisecond, "how often the chain grows by one block")
	workTime := fs.Duration("work-time", 50*time.Millisecond, "how long each job sleeps")
	maxProcessing := fs.Int("max-processing", 4, "jobs in flight per consumer, across every process")
	searchAhead := fs.Int("max-search-ahead", 0, "how far past the lowest unfinished index a job may run (0: 10 x --max-processing)")
	grace := fs.Duration("grace", 10*time.Second, "on SIGINT/SIGTERM, how long running jobs may finish before they are put back")
	chainStart := fs.String("chain-start", "", "when the chain started growing, RFC 3339 (default: now); give every process the same one to share one chain")
	exitWhenDone := fs.Bool("exit-when-done", false, "exit 0 once every block and chunk is done (needs --blocks > 0)")
	if err := parse(fs, args, io.out, consumerHead, "\nEnvironment:\n"+envHelp(true, true)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	switch {
	case *interval <= 0:
		return usagef("--block-interval (%s) must be positive", *interval)
	case *workTime < 0:
		return usagef("--work-time (%s) must not be negative", *workTime)
	case *maxProcessing < 1:
		return usagef("--max-processing (%d) must be at least 1", *maxProcessing)
	case *searchAhead < 0:
		return usagef("--max-search-ahead (%d) must not be negative", *searchAhead)
	case *grace < 0:
		return usagef("--grace (%s) must not be negative", *grace)
	case *exitWhenDone && *blocks == 0:
		return usagef("--exit-when-done needs --blocks > 0")
	case *blocks > consumer.MaxIndex:
		return usagef("--blocks (%d) must be at most %d", *blocks, uint64(consumer.MaxIndex))
	}
	begin := time.Now()
	if *chainStart != "" {
		var err error
		if begin, err = time.Parse(time.RFC3339Nano, *chainStart); err != nil {
			return usagef("--chain-start %q is not an RFC 3339 time (for example 2025-01-02T15:04:05Z)", *chainStart)
		}
	}
	tm, err := readTimings(io.getenv)
	if err != nil {
		return err
	}
	rep, err := readReplication(io.getenv)
	if err != nil {
		return err
	}
	zl, log, err := newLogger(io.err, io.getenv)
	if err != nil {
		return err
	}
	defer zl.Sync() //nolint:errcheck // stderr
	pool, closePool, err := c.openPool()
	if err != nil {
		return err
	}
	defer closePool()
	sigCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	if err := ping(sigCtx, pool, c.namespace, c.where()); err != nil {
		return err
	}

	out := &lineWriter{w: io.out}
	emit := func(words ...string) {
		if err := out.line(words...); err != nil {
			log.Warn("consumer: stdout write failed", "err", err)
		}
	}
	work := func(ctx context.Context) error {
		t := time.NewTimer(*workTime)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	settings := worqr.WorkerConfig{Config: worqr.Config{Namespace: c.namespace, Logger: log}}
	tm.apply(&settings)
	rep.apply(&settings.Config)
	chain := &blockChain{start: begin, interval: *interval, max: *blocks}

	var second atomic.Pointer[consumer.Consumer[uint64]]
	first, err := consumer.New(pool, &consumer.Config[uint64]{
		Name: *name + ".blocks", Source: chain, MaxProcessing: *maxProcessing, MaxSearchAhead: *searchAhead,
		Worker: settings,
		Process: func(ctx context.Context, i uint64, _ uint64) error {
			if err := work(ctx); err != nil {
				return err
			}
			emit("block", strconv.FormatUint(i, 10))
			return nil
		},
		OnProcessed: func(p uint64) {
			emit("processed", *name+".blocks", strconv.FormatUint(p, 10))
			if s := second.Load(); s != nil {
				s.Check() // the chunks of the blocks below p exist now
			}
		},
	})
	if err != nil {
		return workerConfigError(err)
	}
	chunks, err := consumer.New(pool, &consumer.Config[uint64]{
		Name: *name + ".chunks", Source: &chunkSource{blocks: first}, MaxProcessing: *maxProcessing,
		MaxSearchAhead: *searchAhead, Worker: settings,
		Process: func(ctx context.Context, i uint64, _ uint64) error {
			if err := work(ctx); err != nil {
				return err
			}
			b, k := chunkAt(i)
			emit("chunk", strconv.FormatUint(i, 10), strconv.FormatUint(b, 10), strconv.FormatUint(k, 10))
			return nil
		},
		OnProcessed: func(p uint64) { emit("processed", *name+".chunks", strconv.FormatUint(p, 10)) },
	})
	if err != nil {
		return workerConfigError(err)
	}
	second.Store(chunks)

	// The consumers' life is not sigCtx: a consumer whose Start context
	// ends stops at once, with no grace.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	for _, cs := range []*consumer.Consumer[uint64]{chunks, first} {
		if err := cs.Start(life); err != nil {
			return err
		}
	}
	emit("started", first.Worker().ID(), chunks.Worker().ID())
	log.Info("consumer: running", "name", *name, "blocks", *blocks, "namespace", c.namespace)

	tick := time.NewTicker(*interval)
	defer tick.Stop()
	finished := false
	for !finished {
		select {
		case <-sigCtx.Done():
			finished = true
		case <-tick.C:
			first.Check() // the chain may have grown
			if *exitWhenDone {
				b, err1 := first.ProcessedIndex(sigCtx)
				k, err2 := chunks.ProcessedIndex(sigCtx)
				finished = err1 == nil && err2 == nil && b == *blocks && k == chunksBefore(*blocks)
			}
		}
	}
	stopSignals() // from now on a second signal kills the process
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace)
	defer cancel()
	var errs []error
	for _, cs := range []*consumer.Consumer[uint64]{first, chunks} {
		if err := cs.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, fmt.Errorf("stop %s: %w", cs.Name(), err))
		}
	}
	log.Info("consumer: stopped")
	return errors.Join(errs...)
}

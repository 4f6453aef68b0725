package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// batchPayloads returns n small payloads: an EnqueueBatch of them is split
// into steps of 250 tasks (packed), sixteen on the wire at once.
func batchPayloads(n int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(strconv.Itoa(i))
	}
	return ps
}

// checkBatchError checks what a *BatchError says against the queue: the
// first Enqueued payloads are in, in order, and none after them (the
// promise of BatchError: of the rest, at most the step that failed, and
// here it is known).
func checkBatchError(t *testing.T, in *worqr.Inspector, queue string, ps [][]byte, ids []string, err error) {
	t.Helper()
	var be *worqr.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("EnqueueBatch: %v; want a *BatchError", err)
	}
	if len(ids) != be.Enqueued {
		t.Fatalf("%d ids returned, BatchError.Enqueued %d", len(ids), be.Enqueued)
	}
	n := queueLen(t, in, queue)
	if n != be.Enqueued {
		t.Fatalf("%d tasks in the queue, BatchError says %d of %d enqueued (%v): a retry of the rest, as the error advises, enqueues %d twice",
			n, be.Enqueued, be.Total, be.Err, n-be.Enqueued)
	}
	if n == 0 {
		return
	}
	infos, _, perr := in.Tasks(context.Background(), queue, worqr.StateQueued, 0, n)
	if perr != nil {
		t.Fatal(perr)
	}
	for i, info := range infos {
		if string(info.Payload) != string(ps[i]) {
			t.Fatalf("task %d of the queue has payload %q, want %q (the first payloads, in order)", i, info.Payload, ps[i])
		}
	}
}

// A large EnqueueBatch whose connection breaks after Redis applied the
// steps on the wire (their replies lost) used to report only the first
// step enqueued, while sixteen were (4,000 tasks more than it said).
func TestBatchWithLostRepliesSaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, _, c, in := replyLossClient(t)
	ps := batchPayloads(40 * 250)
	// The second step (the first of the window) loses its reply, and so
	// do the fifteen sent with it.
	pool.sendOnly = true
	pool.setLose(nthCall("enqueue_packed", 1))
	ids, err := c.EnqueueBatch(ctx, "b", ps, nil)
	pool.setLose(nil)
	checkBatchError(t, in, "b", ps, ids, err)
}

// A step of a large EnqueueBatch refused by Redis (here out of memory, for
// that one step) used to leave the steps sent behind it applied: tasks
// past the BatchError's count, after a hole, and out of order.
func TestBatchStepRefusedAppliesNoneAfterIt(t *testing.T) {
	ctx := context.Background()
	s := redistest.MustStart()
	defer s.Stop()
	side, err := redis.DialURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	oomCount := func() int {
		info, err := redis.String(side.Do("INFO", "errorstats"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "errorstat_OOM:count="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	// The 17th step sent on the window's connection is flushed alone (the
	// window is full): Redis refuses it for want of memory, then has its
	// memory back for the steps after it.
	var mu sync.Mutex
	sends := 0
	base := s.Pool()
	defer base.Close()
	pool := &hookPool{pool: base, sent: func(cmd string, args []any) func() {
		if cmd != "FCALL" || len(args) == 0 || !strings.HasSuffix(fmt.Sprint(args[0]), "_enqueue_packed") {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		sends++
		if sends != 17 {
			return nil
		}
		before := oomCount()
		if _, err := side.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
			t.Error(err)
		}
		return func() { // after the flush: once Redis refused it
			for deadline := time.Now().Add(10 * time.Second); oomCount() == before && time.Now().Before(deadline); {
			}
			if _, err := side.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
				t.Error(err)
			}
		}
	}}
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	ps := batchPayloads(40 * 250)
	ids, err := c.EnqueueBatch(ctx, "b", ps, nil)
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("EnqueueBatch: %v; want the refused step's OOM", err)
	}
	checkBatchError(t, in, "b", ps, ids, err)
}

// The first step of a large EnqueueBatch runs alone: when its reply was
// lost after Redis applied it, the BatchError said 0 of 2,500 enqueued
// while 250 were in (found by the audit of ordered queues, for plain
// batches). The guard, closed, says how far it got, and a step 0 still on
// its way is refused by it.
func TestBatchWithItsFirstReplyLostSaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, _, c, in := replyLossClient(t)
	ps := batchPayloads(10 * 250)
	pool.setLose(nthCall("enqueue_packed", 1))
	ids, err := c.EnqueueBatch(ctx, "b", ps, nil)
	pool.setLose(nil)
	checkBatchError(t, in, "b", ps, ids, err)
	var be *worqr.BatchError
	if errors.As(err, &be) && be.Enqueued != 250 {
		t.Fatalf("BatchError.Enqueued %d, want 250 (the first step, applied)", be.Enqueued)
	}
}

// An EnqueueBatch of one call (here 10 tasks) is all or nothing. When its
// reply was lost after Redis applied it, the BatchError said 0 of 10
// enqueued while all 10 were in: a caller resending the batch, as the
// error advises, ran each task twice (found by the audit of idempotent
// enqueues). The call leaves its guard behind; the client closes it and
// reads whether the call applied. Both scripts a call of one batch may
// run carry the guard: enqueue_hand (nothing but payloads) and enqueue
// (with a deadline).
func TestBatchOfOneCallWithItsReplyLostSaysWhatIsIn(t *testing.T) {
	for _, tc := range oneCallBatches() {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool, _, c, in := replyLossClient(t)
			// The library loaded first: the call below is applied.
			if _, err := c.Enqueue(ctx, "warm", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			ps := batchPayloads(10)
			pool.setLose(nthCall(tc.script, 1))
			ids, err := c.EnqueueBatch(ctx, "b", ps, tc.opts)
			pool.setLose(nil)
			checkBatchError(t, in, "b", ps, ids, err)
			var be *worqr.BatchError
			if errors.As(err, &be) && be.Enqueued != len(ps) {
				t.Fatalf("BatchError.Enqueued %d, want %d (the call applied)", be.Enqueued, len(ps))
			}
		})
	}
}

// oneCallBatch is an EnqueueBatch that goes in one call of script.
type oneCallBatch struct {
	name, script string
	opts         *worqr.EnqueueOpts
}

func oneCallBatches() []oneCallBatch {
	return []oneCallBatch{
		{"payloads only", "enqueue_hand", nil},
		{"with a deadline", "enqueue", &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Hour)}},
	}
}

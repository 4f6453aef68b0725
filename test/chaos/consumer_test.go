package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestChaosConsumer: three processes run the pipeline of `worqr-example
// consumer` (indexed consumers blocks, then chunks) while they are
// SIGKILLed and replaced, SIGSTOPped past their keepalive TTL, and Redis
// (appendfsync always) is killed and restarted. Checked from outside: each
// processed index never goes down and never passes an index no process
// reported done, both reach the end of the chain, and nothing is left in
// their queues.
func TestChaosConsumer(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	const blocks = 250
	chunks := uint64(6*(blocks/4) + [4]int{0, 0, 1, 3}[blocks%4]) // block i has i%4 chunks
	c := newCluster(t, "consumer", clusterOpts{redisArgs: aofAlways, timings: shortTimings})
	chainStart := time.Now() // one chain for every process
	cl := &consumerLines{done: map[string]map[uint64]bool{"block": {}, "chunk": {}}, changed: make(chan struct{})}
	start := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := startConsumerProc(c, cl, blocks, chainStart)
			if err == nil {
				return
			}
			if time.Now().After(deadline) || redistest.Pause(c.ctx, 300*time.Millisecond) != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < 3; i++ {
		start()
	}
	// Readers of the two consumers' progress (never started).
	read := func(name string) *consumer.Consumer[uint64] {
		r, err := consumer.New(c.pool, &consumer.Config[uint64]{Name: name, Source: noSource{},
			Process: func(context.Context, uint64, uint64) error { return nil },
			Worker:  worqr.WorkerConfig{Config: worqr.Config{Namespace: c.ns}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	progress := map[string]*consumer.Consumer[uint64]{"block": read("chaos.blocks"), "chunk": read("chaos.chunks")}
	last := map[string]uint64{}
	checkProgress := func() (bool, error) {
		end := true
		for kind, r := range progress {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			p, err := r.ProcessedIndex(ctx)
			cancel()
			if err != nil {
				return false, err // Redis away: next time
			}
			if p < last[kind] {
				t.Errorf("%s: processed index went down from %d to %d", kind, last[kind], p)
			}
			last[kind] = p
			if i, ok := cl.waitDone(kind, p); !ok {
				t.Errorf("%s: processed index %d passed index %d, which no process reported done", kind, p, i)
			}
			end = end && p == map[string]uint64{"block": blocks, "chunk": chunks}[kind]
		}
		return end, nil
	}

	run := 12 * time.Second // as long as the chain grows
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var f faults
	f.run(ctx, func(ctx context.Context) {
		for redistest.Pause(ctx, between(time.Second, 2500*time.Millisecond)) == nil {
			if l := c.live(false); len(l) > 0 {
				c.kill(l[rand.IntN(len(l))])
			}
			start()
		}
	})
	f.run(ctx, func(ctx context.Context) {
		for redistest.Pause(ctx, between(2*time.Second, 4*time.Second)) == nil {
			if l := c.live(false); len(l) > 1 {
				c.freeze(l[rand.IntN(len(l))], 1500*time.Millisecond)
			}
		}
	})
	f.run(ctx, func(ctx context.Context) {
		if redistest.Pause(ctx, 5*time.Second) == nil {
			if err := c.restartRedis(); err != nil {
				t.Errorf("restarting redis-server: %v", err)
			}
		}
	})
	// The progress is sampled on wall time while the faults run: the
	// processes report it in Redis only.
	for redistest.Pause(ctx, 50*time.Millisecond) == nil {
		_, _ = checkProgress()
	}
	f.wait()
	endAfterFaults := last["chunk"] < chunks
	ectx, ecancel := context.WithTimeout(c.ctx, time.Minute)
	defer ecancel()
	var err error
	if redistest.Poll(ectx, func() bool { var end bool; end, err = checkProgress(); return end }) != nil {
		t.Fatalf("the consumers did not finish: processed %v, want block %d chunk %d (last error %v)", last, blocks, chunks, err)
	}
	// Takings of processes killed after their job's record and before its
	// end are requeued by a live process's reaper, and end at once.
	in, err := worqr.NewInspector(c.pool, &worqr.Config{Namespace: c.ns})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer scancel()
	for _, name := range []string{"chaos.blocks", "chaos.chunks"} {
		var st *worqr.QueueInfo
		var err error
		if redistest.Poll(sctx, func() bool {
			st, err = in.Queue(sctx, consumer.QueueName(name))
			return err == nil && st.Waiting+st.Scheduled+st.Active+st.Dead == 0
		}) != nil {
			t.Fatalf("%s: left in its queue: %+v (%v)", name, st, err)
		}
	}
	for _, p := range c.stopAll(15 * time.Second) {
		t.Error(p)
	}
	for _, p := range c.unexpectedExits() {
		t.Error(p)
	}
	for _, name := range []string{"chaos.blocks", "chaos.chunks"} {
		st, err := in.Queue(sctx, consumer.QueueName(name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiting+st.Scheduled+st.Active+st.Dead != 0 {
			t.Errorf("%s: left in its queue after the processes stopped: %+v", name, st)
		}
	}
	if !endAfterFaults {
		t.Errorf("the consumers were done before the faults were over: the run tested little")
	}
	faults := c.faultCounts()
	if faults["kill"] == 0 || faults["freeze"] == 0 || faults["redis_restart"] == 0 {
		t.Errorf("not every fault happened: %v", faults)
	}
	publish(t, fmt.Sprintf("consumer: %d blocks and %d chunks done through %v; %d block and %d chunk done lines (done twice: %d, %d)",
		blocks, chunks, faults, cl.lines["block"], cl.lines["chunk"], cl.lines["block"]-blocks, cl.lines["chunk"]-int(chunks)))
}

type noSource struct{}

func (noSource) Head(context.Context) (uint64, error)            { return 0, consumer.ErrNotFound }
func (noSource) AtIndex(context.Context, uint64) (uint64, error) { return 0, consumer.ErrNotFound }

// consumerLines collects the done lines of every consumer process.
type consumerLines struct {
	mu      sync.Mutex
	done    map[string]map[uint64]bool // "block"/"chunk" -> indexes reported done
	lines   map[string]int
	changed chan struct{} // closed (and replaced) at each done line
}

func (cl *consumerLines) add(line string) {
	f := strings.Fields(line)
	if len(f) < 2 || (f[0] != "block" && f[0] != "chunk") {
		return
	}
	i, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.lines == nil {
		cl.lines = map[string]int{}
	}
	cl.done[f[0]][i] = true
	cl.lines[f[0]]++
	close(cl.changed)
	cl.changed = make(chan struct{})
}

// waitDone reports whether every index below p has a done line. A process
// writes the line before its record moves the processed index, so the line
// is in a pipe by the time the index is read; the readers may not have
// parsed it yet: it gets 3s to arrive. It returns the first missing index.
func (cl *consumerLines) waitDone(kind string, p uint64) (uint64, bool) {
	deadline := time.After(3 * time.Second)
	for {
		cl.mu.Lock()
		i := uint64(0)
		for i < p && cl.done[kind][i] {
			i++
		}
		changed := cl.changed
		cl.mu.Unlock()
		if i == p {
			return 0, true
		}
		select {
		case <-changed: // a done line came: look again
		case <-deadline:
			return i, false
		}
	}
}

// startConsumerProc starts one `worqr-example consumer` process of the
// cluster and returns once it printed its started line.
func startConsumerProc(c *cluster, cl *consumerLines, blocks int, chainStart time.Time) error {
	n := c.newProcNumber()
	cmd := exec.Command(workerBin, "consumer", "--name", "chaos", "--blocks", strconv.Itoa(blocks),
		"--block-interval", "60ms", "--work-time", "40ms", "--max-processing", "6", "--max-search-ahead", "12",
		"--grace", "5s", "--chain-start", chainStart.Format(time.RFC3339Nano), "--redis-url", c.redisURLForWorkers(), "--namespace", c.ns)
	cmd.Env = append(append(os.Environ(), c.timingEnv()...), "WORQR_LOG_LEVEL=warn")
	_, err := c.launch(n, cmd, "started ", "consumer process", cl.add)
	return err
}

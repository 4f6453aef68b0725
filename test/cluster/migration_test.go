package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestScriptsDuringMigration calls the queue scripts while their slot is
// half moved (MIGRATING on the owner, IMPORTING on the target, a task hash
// already on the target): every call waits (TRYAGAIN, retried with backoff
// within its context) until the move ends, then applies once, in full.
//
// The requeue is the case that broke before the scripts declared the
// migration guard key: every key it declares exists on the owner, so Redis
// ran it there; it removed the dead worker's taking from its holdings, then
// its LPUSH to the task's priority-level list (a key it cannot declare,
// empty so absent) was refused as a non-local key: Redis does not undo the
// HDEL, and the task was in no list and held by nobody, lost.
func TestScriptsDuringMigration(t *testing.T) {
	needCluster(t)
	cp := rawCluster(context.Background(), t, 16, 20*time.Second)
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(cp, ns)
	q := spread(t, "split-")[0]
	qk := st.Queue(rdb.Standalone(q))

	// On the owner: a dead worker D holds "p" (priority level 3, its level
	// list now empty); a live worker W holds "e"; "w0" waits at level 0;
	// "s0" is due in the scheduled set; "x" is dead; "r" is retained done.
	if _, err := st.MarkLevel(ctx, qk, 3); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteSettings(ctx, qk, rdb.QueueSettings{DeadMaxCount: 100, DeadMaxAgeMs: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	at, err := st.Register(ctx, "W", 60_000, "test", 1, []rdb.QueueRef{qk.Ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Register(ctx, "D", 60_000, "test", 2, []rdb.QueueRef{qk.Ref}); err != nil {
		t.Fatal(err)
	}
	enq := func(id string, a *rdb.EnqueueArgs) {
		t.Helper()
		if a == nil {
			a = &rdb.EnqueueArgs{}
		}
		if _, err := st.Enqueue(ctx, qk, []string{id}, [][]byte{[]byte(id)}, a); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
	}
	take := func(w string, want string, levels int) rdb.Taken {
		t.Helper()
		got, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: w, Until: at + 50_000, Max: 1, Levels: levels})
		if err != nil || len(got) != 1 || got[0].ID != want {
			t.Fatalf("take of %s by %s: %v, %v", want, w, got, err)
		}
		return got[0]
	}
	enq("p", &rdb.EnqueueArgs{Priority: 3})
	take("D", "p", 3)
	for _, id := range []string{"r", "x", "e"} {
		enq(id, nil)
	}
	r := take("W", "r", 3)
	if _, err := st.End(ctx, qk, 3_600_000, []rdb.Ending{rdb.Done(rdb.KindTask, "W", r.PID, "r", nil)}); err != nil {
		t.Fatal(err)
	}
	x := take("W", "x", 3)
	if _, err := st.End(ctx, qk, 0, []rdb.Ending{rdb.Dead(rdb.KindTask, "W", x.PID, "x", "dead")}); err != nil {
		t.Fatal(err)
	}
	e := take("W", "e", 3)
	enq("w0", nil)
	enq("s0", &rdb.EnqueueArgs{DueMillis: 1})

	slot := cluster.TagSlot(q)
	from := ownerOf(t, q)
	to := otherNode(from)
	calls := []splitCall{
		{"requeue of the dead worker's priority task", func(ctx context.Context) error {
			n, _, err := st.Requeue(ctx, qk, []string{"D"}, true)
			if err == nil && n != 1 {
				err = fmt.Errorf("requeued %d, want 1", n)
			}
			return err
		}},
		{"end (done) of a taking", func(ctx context.Context) error {
			res, err := st.End(ctx, qk, 3_600_000, []rdb.Ending{rdb.Done(rdb.KindTask, "W", e.PID, "e", nil)})
			if err == nil && res[0].Outcome != rdb.OutcomeDone {
				err = fmt.Errorf("outcome %v", res[0].Outcome)
			}
			return err
		}},
		{"cancel of a waiting task whose hash moved", func(ctx context.Context) error {
			res, err := st.Cancel(ctx, qk, "w0")
			if err == nil && res != rdb.CancelRemoved {
				err = fmt.Errorf("cancel: %v", res)
			}
			return err
		}},
		{"enqueue", func(ctx context.Context) error {
			_, err := st.Enqueue(ctx, qk, []string{"n1"}, [][]byte{[]byte("n1")}, &rdb.EnqueueArgs{})
			return err
		}},
		{"move of a due task", func(ctx context.Context) error {
			n, err := st.Move(ctx, qk, 100)
			if err == nil && n != 1 {
				err = fmt.Errorf("moved %d, want 1", n)
			}
			return err
		}},
		{"dead requeue", func(ctx context.Context) error {
			n, _, err := st.DeadIDs(ctx, qk, rdb.DeadRequeue, []string{"x"})
			if err == nil && n != 1 {
				err = fmt.Errorf("dead requeue: %d", n)
			}
			return err
		}},
	}
	_, _, tryBefore, _ := cp.Redirections()
	stats := callWhileSplit(ctx, t, cp, slot, from, to, qk.Task("w0"), calls)
	t.Logf("slot moved: %+v", stats)
	// Everything is on the new owner, once: p back at the front of level 3,
	// w0 cancelled (and gone: the queue keeps no ended task), s0, n1 and x
	// waiting at level 0, e done.
	conn, err := redis.Dial("tcp", to.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lvl, err := redis.Strings(conn.Do("LRANGE", qk.Level(3), 0, -1))
	if err != nil || fmt.Sprint(lvl) != "[p]" {
		t.Errorf("level 3 list: %v, %v; want [p] (the requeued task)", lvl, err)
	}
	wait, err := redis.Strings(conn.Do("LRANGE", qk.Waiting, 0, -1))
	if err != nil || len(wait) != 3 || !contains(wait, "s0") || !contains(wait, "n1") || !contains(wait, "x") {
		t.Errorf("waiting list: %v, %v; want s0, n1 and x", wait, err)
	}
	for id, want := range map[string]string{"p": rdb.StateQueued, "e": rdb.StateDone, "w0": ""} {
		rec, err := st.Task(ctx, qk, id)
		if err != nil {
			t.Errorf("task %s: %v", id, err)
			continue
		}
		if rec == nil || want == "" {
			if (rec == nil) != (want == "") {
				t.Errorf("task %s: %+v, want it gone: %v", id, rec, want == "")
			}
			continue
		}
		if rec.State != want {
			t.Errorf("task %s: state %v, want %v", id, rec.State, want)
		}
	}
	if n, err := redis.Int(conn.Do("HLEN", qk.WorkerQueue("D"))); err != nil || n != 0 {
		t.Errorf("D still holds %d takings (%v)", n, err)
	}
	_, _, tryAfter, _ := cp.Redirections()
	t.Logf("TRYAGAIN replies retried: %d", tryAfter-tryBefore)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}

// splitCall is a call a migration test makes while its slot is split.
type splitCall struct {
	name string
	run  func(ctx context.Context) error
}

// callWhileSplit moves slot from the master at from to to. Once the slot is
// marked, it moves key first (the slot's keys are then on both nodes),
// starts every call and checks that they meet TRYAGAIN (3 replies a call,
// as cp counts them) and none returns while the slot is split. After the
// move it checks that every call succeeded, and returns the move's stats.
func callWhileSplit(ctx context.Context, t *testing.T, cp *cluster.Pool, slot int, from string, to *redistest.Server,
	key string, calls []splitCall) redistest.MoveStats {
	t.Helper()
	done := make([]chan error, len(calls))
	_, _, tryBefore, _ := cp.Redirections()
	stats, err := cl.MoveTagSlot(ctx, slot, to, redistest.MoveOpts{Batch: 1000, Between: func() {
		src, err := redis.Dial("tcp", from)
		if err != nil {
			t.Error(err)
			return
		}
		defer src.Close()
		host, port, _ := cutPort(to.Addr)
		if _, err := src.Do("MIGRATE", host, port, "", 0, 5000, "KEYS", key); err != nil {
			t.Errorf("migrating %s: %v", key, err)
			return
		}
		for i, c := range calls {
			done[i] = make(chan error, 1)
			go func() { done[i] <- c.run(ctx) }()
		}
		// Every call meets the split slot and waits (the pool counts the
		// replies it met).
		if !poll(10*time.Second, func() bool {
			_, _, n, _ := cp.Redirections()
			return n-tryBefore >= int64(3*len(calls))
		}) {
			_, _, n, _ := cp.Redirections()
			t.Errorf("only %d TRYAGAIN replies met", n-tryBefore)
		}
		for i, c := range calls {
			select {
			case err := <-done[i]:
				t.Errorf("%s returned while its slot was split: %v", c.name, err)
				done[i] <- err
			default:
			}
		}
	}})
	if err != nil {
		t.Fatalf("moving the slot: %v", err)
	}
	for i, c := range calls {
		if err := <-done[i]; err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	return stats
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// sameSlot returns a name prefix+n whose hash tag is in slot.
func sameSlot(t *testing.T, prefix string, slot int) string {
	t.Helper()
	for i := 0; i < 1_000_000; i++ {
		name := prefix + strconv.Itoa(i)
		if cluster.TagSlot(name) == slot {
			return name
		}
	}
	t.Fatalf("no name %s<n> in slot %d", prefix, slot)
	return ""
}

// TestMoreScriptsDuringMigration is TestScriptsDuringMigration for the
// scripts of periodic tasks, bulk loads, flows, ordered queues and indexed
// consumers: their tags are chosen in one slot (that of {periodic}), which
// is split while they are called; each call waits (TRYAGAIN) and applies
// once after the move. Without the guard, periodic_due ran on the owner and
// stopped at the schedule hash already moved ("non local key").
func TestMoreScriptsDuringMigration(t *testing.T) {
	needCluster(t)
	cp := rawCluster(context.Background(), t, 16, 20*time.Second)
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(cp, ns)
	slot := cluster.TagSlot(rdb.PeriodicTag)
	q := sameSlot(t, "load-", slot)
	ord := sameSlot(t, "ord-", slot)
	cq := sameSlot(t, "cons-", slot)
	flowName := sameSlot(t, "flow-", slot)
	client, err := worqr.NewClient(cp, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(cp, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	flow := &worqr.Flow{Name: flowName, Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}}
	// Keys of the slot on the owner before the move.
	if ok, err := st.PutSchedule(ctx, "pre", []byte(`{}`), "k", 1); err != nil || !ok {
		t.Fatalf("put schedule: %v, %v", ok, err)
	}
	qk := st.Queue(rdb.Standalone(q))
	ck := rdb.NewKeys(ns).Consumer(cq)
	var runID string
	calls := []splitCall{
		{"periodic put", func(ctx context.Context) error {
			ok, err := st.PutSchedule(ctx, "new", []byte(`{}`), "k", 1)
			if err == nil && !ok {
				err = errors.New("not put")
			}
			return err
		}},
		{"periodic due", func(ctx context.Context) error {
			_, due, err := st.DueSchedules(ctx, 0, 10)
			if err == nil && len(due) == 0 {
				err = errors.New("nothing due")
			}
			return err
		}},
		{"load chunk", func(ctx context.Context) error {
			r, err := st.LoadChunk(ctx, qk, &rdb.LoadArgs{Name: "l", Fingerprint: "fp", TTLMillis: 60_000},
				&rdb.LoadChunk{First: 1, After: 3, IDs: []string{"l1", "l2"}, Payloads: [][]byte{[]byte("1"), []byte("2")}, Tail: "t"})
			if err == nil && r.Status != rdb.LoadApplied {
				err = fmt.Errorf("load: %+v", r)
			}
			return err
		}},
		{"flow start", func(ctx context.Context) error {
			var err error
			runID, err = client.StartRun(ctx, flow, map[string]string{"a": "b"}, nil)
			return err
		}},
		{"ordered enqueue", func(ctx context.Context) error {
			_, err := client.Enqueue(ctx, ord, []byte("o"), &worqr.EnqueueOpts{Key: "k1"})
			return err
		}},
		{"consumer dispatch", func(ctx context.Context) error {
			_, n, err := st.Dispatch(ctx, ck, rdb.ConsumerLimits{MaxProcessing: 3, MaxSearchAhead: 10}, 10, true)
			if err == nil && n != 3 {
				err = fmt.Errorf("dispatched %d, want 3", n)
			}
			return err
		}},
	}
	from := ownerOf(t, rdb.PeriodicTag)
	to := otherNode(from)
	callWhileSplit(ctx, t, cp, slot, from, to, rdb.NewKeys(ns).Schedule("pre"), calls)
	// Each applied once, on the new owner.
	if s, err := st.Schedule(ctx, "new"); err != nil || s == nil {
		t.Errorf("schedule: %v, %v", s, err)
	}
	if cpt, err := st.LoadState(ctx, qk, "l"); err != nil || cpt == nil || cpt.Next != 3 || cpt.Tasks != 2 {
		t.Errorf("load checkpoint: %+v, %v", cpt, err)
	}
	if qi, err := in.Queue(ctx, q); err != nil || qi.Waiting != 2 {
		t.Errorf("loaded queue: %+v, %v; want 2 waiting", qi, err)
	}
	// The loaded tasks waited packed; their hash moved with the slot, and a
	// take on the new owner (a cluster take reads before it writes) makes
	// their task hashes from it.
	if got, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2}); err != nil || len(got) != 2 ||
		string(got[0].Payload) != "1" || string(got[1].Payload) != "2" || got[0].PID == "" || got[1].PID == "" {
		t.Errorf("take of the loaded tasks: %+v, %v", got, err)
	}
	if ri, err := in.Run(ctx, flow.Name, runID); err != nil || ri.State["a"] != "b" {
		t.Errorf("run %s: %+v, %v", runID, ri, err)
	}
	if qi, err := in.Queue(ctx, ord); err != nil || qi.Waiting != 1 {
		t.Errorf("ordered queue: %+v, %v; want 1 waiting", qi, err)
	}
	if p, err := st.ReadProgress(ctx, ck, 0); err != nil || p.Next != 3 {
		t.Errorf("consumer progress: %+v, %v", p, err)
	}
}

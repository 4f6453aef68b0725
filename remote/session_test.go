package remote_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// The same bounds hold for a remote's Forward and FanOut (the gateway's
// forward and fan_out): refused, naming the field, the taking still held.
func TestRemoteStageResultIsBounded(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rb", Stages: []worqr.Stage{
		{Name: "split", Children: map[string]worqr.QueueConfig{"part": {}}},
	}}
	b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rb", Stages: []worqr.Stage{
		{Name: "split", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"part": {Handler: worqr.HandlerFunc(nil), Concurrency: 1}}},
	}}
	if _, err := b.client.StartRun(ctx, cf, nil, nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "rb/split", "rb/part")
	k := takeOne(t, s, "rb/split", 0)
	if _, err := s.Forward(ctx, k.PID, manyFields(defaults.MaxStateFields+1, 1)); invalidField(t, "forward of too many fields", err) != "fields" {
		t.Fatalf("forward of too many fields: %v, want the field named fields", err)
	}
	if _, err := s.Forward(ctx, k.PID, manyFields(5, 1<<20)); invalidField(t, "forward of 5 MiB", err) != "fields" {
		t.Fatalf("forward of 5 MiB: %v, want the field named fields", err)
	}
	cs := make([]worqr.ChildSpec, 5)
	for i := range cs {
		cs[i] = worqr.ChildSpec{Queue: "part", Payload: make([]byte, 1<<20)}
	}
	if _, err := s.FanOut(ctx, k.PID, nil, cs); invalidField(t, "fan-out of 5 MiB", err) != "children" {
		t.Fatalf("fan-out of 5 MiB: %v, want the field named children", err)
	}
	// Still held: a fan-out within the bounds ends it.
	if out, err := s.FanOut(ctx, k.PID, map[string]string{"a": "b"}, cs[:3]); err != nil || out != worqr.EventFannedOut {
		t.Fatalf("fan-out of 3 MiB = %q, %v; want fanned out", out, err)
	}
}

func TestRemoteFinishIsIdempotentByPID(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"q": {Retention: time.Minute}}})
	id, err := b.client.Enqueue(ctx, "q", []byte("hello"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	k := takeOne(t, s, "q", 0)
	if k.TaskID != id || string(k.Payload) != "hello" || k.Attempt != 1 || k.PID == "" {
		t.Fatalf("taking %+v", k)
	}
	for i := 0; i < 2; i++ { // the second call stands for a retry after a lost reply
		out, err := s.Finish(ctx, k.PID, []byte("ok"))
		if err != nil || out != worqr.EventDone {
			t.Fatalf("finish #%d = %q, %v; want done", i+1, out, err)
		}
	}
	if _, err := s.Fail(ctx, k.PID, "late", 0); !errors.Is(err, remote.ErrNotOwner) {
		t.Errorf("fail after finish = %v, want ErrNotOwner", err)
	}
	if _, err := s.GiveBack(ctx, "nosuchpid"); !errors.Is(err, remote.ErrNotOwner) {
		t.Errorf("give back of an unknown pid = %v, want ErrNotOwner", err)
	}
	info, err := b.insp.Task(ctx, "q", id)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateDone || string(info.Result) != "ok" {
		t.Errorf("task %s %q, want done with result ok", info.State, info.Result)
	}
}

func TestRemoteTakeRequestIDAndValidation(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true})
	if _, err := b.client.EnqueueBatch(ctx, "q", [][]byte{[]byte("a"), []byte("b")}, nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q", "q2")
	req := remote.TakeRequest{Queue: "q", Max: 1, RequestID: "r1"}
	first, err := s.Take(ctx, req)
	if err != nil || len(first) != 1 {
		t.Fatalf("take = %v, %v", first, err)
	}
	again, err := s.Take(ctx, req)
	if err != nil || len(again) != 1 || again[0].PID != first[0].PID {
		t.Fatalf("repeated take = %v, %v; want the same taking %s", again, err, first[0].PID)
	}
	for _, c := range []struct {
		req   remote.TakeRequest
		field string
	}{
		{remote.TakeRequest{Queue: "other", Max: 1}, "queue"},
		{remote.TakeRequest{Queue: "q", Max: 0}, "max"},
		{remote.TakeRequest{Queue: "q", Max: 1, Wait: time.Hour}, "wait"},
		{remote.TakeRequest{Queue: "q", Max: 1, RequestID: "a b"}, "request_id"},
		// The id of a take of q, for another queue: it answered q's
		// takings as q2's.
		{remote.TakeRequest{Queue: "q2", Max: 1, RequestID: "r1"}, "request_id"},
	} {
		_, err := s.Take(ctx, c.req)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("take %+v = %v, want an InvalidError on %s", c.req, err, c.field)
		}
	}
	if _, err := b.remote.Open(ctx, remote.OpenOpts{Queues: []string{"bad name"}}); err == nil || !strings.Contains(err.Error(), "queues[0]") {
		t.Errorf("open with a bad queue = %v, want an error naming queues[0]", err)
	}
}

// A session whose remote stopped beating loses its takings to the recovery,
// and its late end is refused by Redis's ownership check even when the
// session itself has not noticed (its local clock is frozen here), while
// the taking of the session that took the task again counts.
func TestRemoteZombieEndIsRefused(t *testing.T) {
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute},
		SessionTTL: 300 * time.Millisecond, ReaperInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	id, err := b.client.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	zombie := open(t, b, "q")
	old := takeOne(t, zombie, "q", 0)

	live := open(t, b, "q")
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	go func() {
		for beatCtx.Err() == nil {
			_, _ = live.Beat(beatCtx, nil)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	ks, err := live.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1, Wait: 10 * time.Second})
	if err != nil || len(ks) != 1 {
		t.Fatalf("the live session took %v, %v; want the recovered task", ks, err)
	}
	if ks[0].TaskID != id || ks[0].PID == old.PID || ks[0].Crashes != 1 {
		t.Fatalf("retaken %+v, want task %s under a new pid with one crash", ks[0], id)
	}
	if _, err := zombie.Finish(ctx, old.PID, []byte("zombie")); !errors.Is(err, remote.ErrNotOwner) {
		t.Fatalf("zombie finish = %v, want ErrNotOwner", err)
	}
	if out, err := live.Finish(ctx, ks[0].PID, []byte("live")); err != nil || out != worqr.EventDone {
		t.Fatalf("live finish = %q, %v", out, err)
	}
	info, err := b.insp.Task(ctx, "q", id)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateDone || string(info.Result) != "live" {
		t.Errorf("task %s %q, want done by the live session", info.State, info.Result)
	}
}

func TestRemoteBeatReportsCancelsAndOrphans(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute}})
	ids, err := b.client.EnqueueBatch(ctx, "q", [][]byte{[]byte("a"), []byte("b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	ks, err := s.Take(ctx, remote.TakeRequest{Queue: "q", Max: 2})
	if err != nil || len(ks) != 2 {
		t.Fatalf("take = %v, %v", ks, err)
	}
	if st, err := b.client.Cancel(ctx, "q", ks[0].TaskID); err != nil || st != worqr.CancelRequested {
		t.Fatalf("cancel = %v, %v", st, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var rep remote.BeatReply
	for len(rep.Cancel) == 0 && time.Now().Before(deadline) {
		if rep, err = s.Beat(ctx, []string{ks[0].PID, ks[1].PID}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rep.Cancel) != 1 || rep.Cancel[0] != ks[0].PID {
		t.Fatalf("beat cancels %v, want [%s]", rep.Cancel, ks[0].PID)
	}
	if out, err := s.Finish(ctx, ks[0].PID, nil); err != nil || out != worqr.EventCancelled {
		t.Errorf("finish of a cancelled task = %q, %v; want cancelled", out, err)
	}
	// The remote forgot the second taking (say its take reply was lost):
	// a beat that does not list it, after one that came since the take,
	// gives it back.
	if rep, err = s.Beat(ctx, []string{}); err != nil {
		t.Fatal(err)
	}
	if len(rep.Lost) != 1 || rep.Lost[0] != ks[1].PID {
		t.Fatalf("beat lost %v, want [%s]", rep.Lost, ks[1].PID)
	}
	info, err := b.insp.Task(ctx, "q", ids[1])
	if err != nil || info.State != worqr.StateQueued {
		t.Fatalf("orphan task = %+v, %v; want queued again", info, err)
	}
}

func TestRemoteCloseRequeues(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true})
	id, err := b.client.Enqueue(ctx, "q", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	k := takeOne(t, s, "q", 0)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, k.PID, nil); !errors.Is(err, remote.ErrNotOwner) {
		t.Errorf("finish after close = %v, want ErrNotOwner", err)
	}
	info, err := b.insp.Task(ctx, "q", id)
	if err != nil || info.State != worqr.StateQueued || info.Crashes != 0 {
		t.Fatalf("task after close = %+v, %v; want queued, no crash", info, err)
	}
	s2 := open(t, b, "q")
	if k2 := takeOne(t, s2, "q", 0); k2.TaskID != id {
		t.Errorf("took %s, want %s", k2.TaskID, id)
	}
}

func TestRemoteFlowForwardAndFanOut(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rf", Stages: []worqr.Stage{
		{Name: "split", Children: map[string]worqr.QueueConfig{"part": {}}},
		{Name: "join"},
	}}
	b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{flow}})
	client := b.client
	// The Client needs a complete flow (with handlers) to start runs.
	cf := &worqr.Flow{Name: "rf", Stages: []worqr.Stage{
		{Name: "split", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"part": {Handler: worqr.HandlerFunc(nil), Concurrency: 1}}},
		{Name: "join", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := client.StartRun(ctx, cf, map[string]string{"n": "2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "rf/split", "rf/part", "rf/join")
	k := takeOne(t, s, "rf/split", 0)
	if k.TaskID != runID || k.State["n"] != "2" {
		t.Fatalf("stage taking %+v", k)
	}
	if out, err := s.Finish(ctx, k.PID, []byte("x")); err != nil || out != worqr.EventForwarded {
		t.Fatalf("finish of a stage = %q, %v; want forwarded", out, err)
	}
	j := takeOne(t, s, "rf/join", 0)
	if out, err := s.Forward(ctx, j.PID, map[string]string{"joined": "yes"}); err != nil || out != worqr.EventDone {
		t.Fatalf("forward of the last stage = %q, %v; want done (the run ends)", out, err)
	}

	run2, err := client.StartRun(ctx, cf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	k = takeOne(t, s, "rf/split", 0)
	if _, err := s.FanOut(ctx, k.PID, nil, []worqr.ChildSpec{{Queue: "nope"}}); err == nil || !strings.Contains(err.Error(), "children[0].queue") {
		t.Fatalf("fan-out into an undeclared queue = %v, want an error naming children[0].queue", err)
	}
	if out, err := s.FanOut(ctx, k.PID, map[string]string{"split": "1"}, []worqr.ChildSpec{{Queue: "part", Payload: []byte("p1")}, {Queue: "part", Payload: []byte("p2")}}); err != nil || out != worqr.EventFannedOut {
		t.Fatalf("fan-out = %q, %v", out, err)
	}
	for i := 0; i < 2; i++ {
		c := takeOne(t, s, "rf/part", 0)
		if c.Parent != run2 {
			t.Fatalf("child %+v, want parent %s", c, run2)
		}
		if _, err := s.Forward(ctx, c.PID, nil); err == nil {
			t.Fatal("forward of a child taking worked; want an error")
		}
		if _, err := s.Finish(ctx, c.PID, []byte("r"+string(c.Payload))); err != nil {
			t.Fatal(err)
		}
	}
	j = takeOne(t, s, "rf/join", 0)
	if j.TaskID != run2 || j.State["split"] != "1" || len(j.Children) != 2 {
		t.Fatalf("join taking %+v, want run %s with its field and 2 children", j, run2)
	}
	if _, err := s.Finish(ctx, j.PID, nil); err != nil {
		t.Fatal(err)
	}
	info, err := b.insp.Run(ctx, cf.Name, run2)
	if err != nil || info.Status != worqr.RunDone {
		t.Fatalf("run = %+v, %v; want done", info, err)
	}
}

func TestRemoteLostRepliesAreAnsweredRight(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Int32
	var match atomic.Pointer[func([]any) bool]
	never := func([]any) bool { return false }
	match.Store(&never)
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &redistest.LossyConn{Conn: c, Armed: &armed, Match: func(args []any) bool { return (*match.Load())(args) }}, nil
	}}
	defer pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	r, err := remote.NewServer(pool, &remote.Config{Config: cfg, AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_ = r.Stop(sctx)
	}()
	c := newClient(t, pool, &cfg)
	in := newInspector(t, pool, &cfg)
	id, err := c.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Open(ctx, remote.OpenOpts{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}

	// A take whose reply is lost: its taking is released before the next
	// take, which gets the task again under a new pid.
	takeMatch := redistest.HasArg(s.ID())
	match.Store(&takeMatch)
	armed.Store(1)
	if ks, err := s.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1}); err == nil {
		t.Fatalf("take with its reply lost = %v, want an error", ks)
	}
	k := takeOne(t, s, "q", 0)
	if k.TaskID != id || k.Crashes != 0 {
		t.Fatalf("retake %+v, want task %s with no crash", k, id)
	}

	// An end whose reply is lost after Redis applied it answers done,
	// and so does its repeat.
	endMatch := redistest.HasArg("done")
	match.Store(&endMatch)
	armed.Store(1)
	for i := 0; i < 2; i++ {
		if out, err := s.Finish(ctx, k.PID, []byte("r")); err != nil || out != worqr.EventDone {
			t.Fatalf("finish #%d with the first reply lost = %q, %v; want done", i+1, out, err)
		}
	}
	if armed.Load() >= 0 {
		t.Fatal("no reply was lost: the test did not test anything")
	}
	info, err := in.Task(ctx, "q", id)
	if err != nil || info.State != worqr.StateDone || string(info.Result) != "r" {
		t.Fatalf("task = %+v, %v; want done with result r", info, err)
	}

	// The same for a task whose cancel was asked while it was held: the
	// end records it cancelled, and so says the answer, and its repeat.
	id2, err := c.Enqueue(ctx, "q", []byte("y"), nil)
	if err != nil {
		t.Fatal(err)
	}
	k2 := takeOne(t, s, "q", 0)
	if st, err := c.Cancel(ctx, "q", id2); err != nil || st != worqr.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", st, err)
	}
	armed.Store(1)
	for i := 0; i < 2; i++ {
		if out, err := s.Finish(ctx, k2.PID, nil); err != nil || out != worqr.EventCancelled {
			t.Fatalf("finish #%d of a cancelled task with the first reply lost = %q, %v; want cancelled", i+1, out, err)
		}
	}
	if armed.Load() >= 0 {
		t.Fatal("no reply was lost")
	}
	if info, err := in.Task(ctx, "q", id2); err != nil || info.State != worqr.StateCancelled {
		t.Fatalf("task = %+v, %v; want cancelled", info, err)
	}
}

// A remote queue takes one task at a time: batches per key are refused,
// with the field named, rather than ignored.
func TestRemoteRefusesKeyBatch(t *testing.T) {
	pool := srv.TagCheckedPool(t)
	_, err := remote.NewServer(pool, &remote.Config{Queues: map[string]worqr.QueueConfig{"q": {KeyBatch: 4}}})
	if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), `Queues["q"].KeyBatch`) {
		t.Fatalf("NewServer with KeyBatch = %v; want ErrInvalid naming Queues[\"q\"].KeyBatch", err)
	}
}

// A task taken past its deadline is not handed to the remote: the session
// ends it as expired, as a Worker does, and the take goes on to the next.
func TestRemoteExpiredIsNotHanded(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"q": {Retention: time.Minute}}})
	// A deadline already past (Redis time is the clock that counts: a
	// minute leaves room for any skew with this process).
	late, err := b.client.Enqueue(ctx, "q", []byte("late"), &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	next, err := b.client.Enqueue(ctx, "q", []byte("next"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	// No wait: the take that expired the late task goes on at once.
	k := takeOne(t, s, "q", 0)
	if k.TaskID != next || k.Attempt != 1 {
		t.Fatalf("handed %s (attempt %d), want %s: the task past its deadline is not handed", k.TaskID, k.Attempt, next)
	}
	info, err := b.insp.Task(ctx, "", late)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateExpired {
		t.Fatalf("state %s, want expired", info.State)
	}
}

// While the Server drains, a take hands out nothing and waits out its wait
// (a remote that takes again at once would spin through the grace period),
// and returns when the Server has stopped.
func TestRemoteDrainingTakeWaits(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"q": {}}})
	if _, err := b.client.Enqueue(ctx, "q", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	holder, idle := open(t, b, "q"), open(t, b, "q")
	k := takeOne(t, holder, "q", 0)
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		stopped <- b.remote.Stop(sctx)
	}()
	wait(t, 10*time.Second, "the Server to drain", b.remote.Draining)
	if _, err := b.client.Enqueue(ctx, "q", []byte("y"), nil); err != nil {
		t.Fatal(err)
	}
	const wait = 300 * time.Millisecond
	start := time.Now()
	ks, err := idle.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1, Wait: wait})
	if err != nil || len(ks) != 0 {
		t.Fatalf("take while draining = %v, %v; want nothing", ks, err)
	}
	if d := time.Since(start); d < wait {
		t.Fatalf("take while draining returned after %s, before its %s wait", d, wait)
	}
	// A longer wait ends when the Server has stopped (the holder finishes).
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = idle.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1, Wait: 20 * time.Second})
	}()
	if _, err := holder.Finish(ctx, k.PID, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop = %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a take waiting while the Server drained did not return once it stopped")
	}
}

// A session that holds MaxHeld takings is told so (ErrTooManyHeld, which
// the gateway answers resource_exhausted), not that its request was bad.
func TestRemoteTakeBeyondMaxHeld(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{MaxHeld: 1, Queues: map[string]worqr.QueueConfig{"q": {}}})
	for i := 0; i < 2; i++ {
		if _, err := b.client.Enqueue(ctx, "q", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, b, "q")
	takeOne(t, s, "q", 0)
	if _, err := s.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1}); !errors.Is(err, remote.ErrTooManyHeld) || errors.Is(err, worqr.ErrInvalid) {
		t.Fatalf("take beyond MaxHeld = %v, want ErrTooManyHeld", err)
	}
}

// A remote session whose take got a run too big to come with it, and could
// not read it, gives the taking back at once: it waited, held by the live
// session, for its next take from that queue, which a remote may never
// make. The run is taken again, whole, once reads work.
func TestRemoteGivesBackARunItCouldNotRead(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	pool := redistest.NewFaultPool(base)
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{{Name: "s1"}}}
	r, err := remote.NewServer(pool, &remote.Config{Config: worqr.Config{Namespace: ns, DisableEvents: true},
		Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	})
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &cfg)
	cf := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}}}}
	id, err := c.StartRun(ctx, cf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The records of earlier fan-outs: 6,000 fields, over what a take hands out.
	conn := base.Get()
	defer conn.Close()
	args := []any{ns + ":{wide}:t:" + id}
	for i := range 3000 {
		k := id + ".k" + strconv.Itoa(i)
		args = append(args, "k:"+k, "done", "kq:"+k, "kids")
	}
	if _, err := conn.Do("HSET", args...); err != nil {
		t.Fatal(err)
	}
	s, err := r.Open(ctx, remote.OpenOpts{Name: "wide", Queues: []string{"wide/s1"}})
	if err != nil {
		t.Fatal(err)
	}
	pool.Refuse.Store("HSCAN") // the run's read in steps fails
	if ks, err := s.Take(ctx, remote.TakeRequest{Queue: "wide/s1", Max: 1}); err == nil {
		t.Fatalf("take with the run's read failing = %+v, nil; want an error", ks)
	}
	held, err := redis.Int(conn.Do("HLEN", ns+":{wide}:wq:s1:"+s.ID()))
	if err != nil || held != 0 {
		t.Fatalf("after the failed read the session holds %d takings (%v), want none: given back at once", held, err)
	}
	if n := queueLen(t, in, "wide/s1"); n != 1 {
		t.Fatalf("the stage's queue holds %d, want the run back", n)
	}
	pool.Refuse.Store("")
	ks, err := s.Take(ctx, remote.TakeRequest{Queue: "wide/s1", Max: 1})
	if err != nil || len(ks) != 1 || ks[0].TaskID != id || len(ks[0].Children) != 3000 {
		t.Fatalf("take after reads work again = %d takings, %v; want the run with its 3,000 children", len(ks), err)
	}
}

// Remote sessions apply a queue's global limits, as Go workers do: the
// limits of the Config are stored, a take starts no more than they
// allow, and an end that frees a slot wakes a take waiting for one.
func TestRemoteAppliesGlobalLimits(t *testing.T) {
	ctx := context.Background()
	// A poll interval longer than the takes' waits: a take held by a limit
	// asks again only when woken.
	b := setupRemote(t, ctx, remote.Config{PollInterval: time.Minute, Queues: map[string]worqr.QueueConfig{
		"conc": {Limits: &worqr.Limits{Concurrency: 2}},
		"rate": {},
	}})
	if err := b.insp.SetLimits(ctx, "rate", worqr.Limits{Rate: 2, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"conc", "rate"} {
		for i := 0; i < 4; i++ {
			if _, err := b.client.Enqueue(ctx, q, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := open(t, b, "conc", "rate")
	if l, err := b.insp.Limits(ctx, "conc"); err != nil || l.Concurrency != 2 {
		t.Fatalf("limits of conc = %+v, %v; want the Config's Concurrency 2 stored", l, err)
	}

	take := func(q string, wait time.Duration) []remote.Taking {
		t.Helper()
		ks, err := s.Take(ctx, remote.TakeRequest{Queue: q, Max: 4, Wait: wait})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	held := take("conc", 0)
	if len(held) != 2 {
		t.Fatalf("took %d tasks of a queue with Concurrency 2, want 2", len(held))
	}
	if ks := take("conc", 0); len(ks) != 0 {
		t.Fatalf("took %d more while 2 run, want none", len(ks))
	}
	// The end of a taking of the limited queue announces its freed slot
	// on the queue's wake channel, where every worker's take waits.
	c, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	psc := redis.PubSubConn{Conn: c}
	if err := psc.Subscribe(rdb.NewKeys(b.ns).Queue(rdb.Standalone("conc")).WakeChannel); err != nil {
		t.Fatal(err)
	}
	if _, ok := psc.Receive().(redis.Subscription); !ok {
		t.Fatal("subscribe")
	}
	if out, err := s.Finish(ctx, held[0].PID, nil); err != nil || out != worqr.EventDone {
		t.Fatalf("finish = %q, %v", out, err)
	}
	if m, ok := psc.ReceiveWithTimeout(10 * time.Second).(redis.Message); !ok || rdb.IsHandoff(m.Data) {
		t.Fatal("the end of a taking of a queue with a concurrency limit announced no freed slot")
	}
	if ks := take("conc", 0); len(ks) != 1 {
		t.Fatalf("took %d tasks once one of 2 ended, want 1", len(ks))
	}

	if ks := take("rate", 0); len(ks) != 2 {
		t.Fatalf("took %d tasks of a queue limited to 2 an hour, want 2", len(ks))
	}
	if ks := take("rate", 100*time.Millisecond); len(ks) != 0 {
		t.Fatalf("took %d more within the hour, want none", len(ks))
	}
	if err := b.insp.SetLimits(ctx, "rate", worqr.Limits{}); err != nil {
		t.Fatal(err)
	}
	// The announcement of the change wakes the take, which asks again.
	if ks := take("rate", 20*time.Second); len(ks) == 0 {
		t.Fatal("a take after the rate limit was removed got nothing")
	}
}

// Remote sessions take a queue's higher priority levels first, as Go
// workers do; before, a task enqueued with a priority never reached them.
func TestRemoteTakesByPriority(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"q": {}}})
	var want []string
	for _, p := range []int{0, 0, 5, 2} {
		id, err := b.client.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{Priority: p})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	want = []string{want[2], want[3], want[0], want[1]}
	s := open(t, b, "q")
	for i, id := range want {
		if k := takeOne(t, s, "q", 0); k.TaskID != id {
			t.Fatalf("take #%d got %s, want %s (levels 5, 2, then 0 in order)", i+1, k.TaskID, id)
		}
	}
}

// A Config queue's key policy is stored when a session first asks
// for the queue, as a Worker's is at its start: the remote wrote the zero
// policy over it (merging off), whatever its QueueConfig.Keys said (found
// by an audit).
func TestRemoteStoresItsKeyPolicy(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"k": {Keys: worqr.KeyPolicy{Merge: true}}}})
	open(t, b, "k")
	first, err := b.client.Enqueue(ctx, "k", []byte("a"), &worqr.EnqueueOpts{Key: "x"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.client.Enqueue(ctx, "k", []byte("b"), &worqr.EnqueueOpts{Key: "x"})
	if err != nil || second != first {
		t.Fatalf("a second enqueue of key x = %s, %v; want it merged into %s (KeyPolicy.Merge)", second, err, first)
	}
}

// TestRemoteStageCancelledDeepEndsAsStage: a run cancelled while it waited
// deep in its stage's list (past STOP_SCAN entries) stays there, marked,
// and the take that reaches it hands it out not to run. A remote session
// ends such a taking itself (rdb.NotRun); the taking it keeps has no run
// state (dropped to save memory), so the end must still be a stage's: as a
// plain task's, end.lua finalized the run's hash with the stage queue's
// retention (0: deleted) and the cancelled run vanished.
func TestRemoteStageCancelledDeepEndsAsStage(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rdeep", Stages: []worqr.Stage{{Name: "only"}}}
	b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rdeep", Stages: []worqr.Stage{
		{Name: "only", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := b.client.StartRun(ctx, cf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 20,000 ids of other runs behind it: the cancel marks it where it waits.
	c := srv.Pool().Get()
	defer c.Close()
	list := b.ns + ":{rdeep}:q:only"
	for lo := 0; lo < 20000; lo += 1000 {
		args := []any{list}
		for i := lo; i < lo+1000; i++ {
			args = append(args, "other"+strconv.Itoa(i))
		}
		if _, err := c.Do("RPUSH", args...); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := b.client.CancelRun(ctx, cf, runID); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	s := open(t, b, "rdeep/only")
	ks, err := s.Take(ctx, remote.TakeRequest{Queue: "rdeep/only", Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 0 {
		t.Fatalf("took %+v: the cancelled run was handed to run", ks)
	}
	info, err := b.insp.Run(ctx, cf.Name, runID)
	if err != nil {
		t.Fatalf("run after the remote's take: %v; want it kept, cancelled", err)
	}
	if info.Status != worqr.RunCancelled {
		t.Fatalf("run status %q, want cancelled", info.Status)
	}
	if n, _ := c.Do("HLEN", b.ns+":{rdeep}:wq:only:"+s.ID()); n.(int64) != 0 {
		t.Fatalf("the session still holds %d takings", n)
	}
}

// refusingConn answers the next armed script calls that match with a Redis
// error reply, without sending them (an OOM at maxmemory, a BUSY script):
// nothing was applied.
type refusingConn struct {
	redis.Conn
	armed *atomic.Int32
	match func(args []any) bool
}

func (c *refusingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if (cmd == "EVALSHA" || cmd == "EVAL" || cmd == "FCALL") && c.match(args) && c.armed.Add(-1) >= 0 {
		return nil, redis.Error("OOM command not allowed when used memory > 'maxmemory'.")
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *refusingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c *refusingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *refusingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// A take that finds a task past its deadline ends it as expired without
// handing it to the remote. When that end failed (here a Redis error reply;
// a connection error once the caller hung up does the same), nothing ever
// ended it again: the taking stayed in the session as held and never
// handed out, known to every release (so never put back), given back only
// by a beat with check_running (which the gateway's sample worker does not
// send). The task stayed active, out of every worker's reach, for as long
// as the remote kept its session alive, and counted against MaxHeld and
// against Stop's drain.
func TestRemoteNotRunEndThatFailedIsRetried(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &refusingConn{Conn: c, armed: &armed, match: redistest.HasArg("expire")}, nil
	}}
	defer pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	r, err := remote.NewServer(pool, &remote.Config{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Retention: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_ = r.Stop(sctx)
	}()
	c := newClient(t, pool, &cfg)
	insp := newInspector(t, pool, &cfg)
	late, err := c.Enqueue(ctx, "q", []byte("late"), &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Open(ctx, remote.OpenOpts{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	if ks, err := s.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1}); err != nil || len(ks) != 0 {
		t.Fatalf("take = %v, %v; want nothing (the only task is past its deadline)", ks, err)
	}
	if armed.Load() > 0 {
		t.Fatal("the expire end was not refused: the test tested nothing")
	}
	// The remote goes on as the sample worker does: beats, takes.
	if _, err := s.Beat(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ks, err := s.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1}); err != nil || len(ks) != 0 {
		t.Fatalf("second take = %v, %v; want nothing", ks, err)
	}
	if _, err := s.Beat(ctx, nil); err != nil {
		t.Fatal(err)
	}
	info, err := insp.Task(ctx, "", late)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateExpired {
		t.Fatalf("task past its deadline is %s (worker %s), want expired: its failed end was never tried again", info.State, info.WorkerID)
	}
}

// A session that takes from two stand-alone queues gets the same pid from
// both: pids count up per tag, and each stand-alone queue is a tag of its
// own. The session kept its takings by pid alone, so the second taking
// replaced the first: the remote's Finish of the first taking ended the
// second's task (the wrong task, with the wrong result), and the first
// taking stayed held, out of reach of every end, beat and cancel, until the
// session ended. A Worker keeps each queue's takings apart.
func TestRemoteTakingsOfTwoQueuesAreKeptApart(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute}})
	idA, err := b.client.Enqueue(ctx, "pa", []byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := b.client.Enqueue(ctx, "pb", []byte("b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "pa", "pb")
	ka := takeOne(t, s, "pa", 0)
	kb := takeOne(t, s, "pb", 0)
	if ka.PID == kb.PID {
		t.Errorf("two takings of the session share the pid %q: the remote cannot name either", ka.PID)
	}
	if out, err := s.Finish(ctx, ka.PID, []byte("ra")); err != nil || out != worqr.EventDone {
		t.Fatalf("finish of pa's taking = %q, %v", out, err)
	}
	if out, err := s.Finish(ctx, kb.PID, []byte("rb")); err != nil || out != worqr.EventDone {
		t.Fatalf("finish of pb's taking = %q, %v", out, err)
	}
	for _, c := range []struct{ queue, id, result string }{{"pa", idA, "ra"}, {"pb", idB, "rb"}} {
		info, err := b.insp.Task(ctx, c.queue, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != worqr.StateDone || string(info.Result) != c.result {
			t.Errorf("task of %s: %s with result %q, want done with %q", c.queue, info.State, info.Result, c.result)
		}
	}
}

// A task of an ordered queue (EnqueueOpts.Key) is stored in an envelope
// (its key and payloads). A Worker's handler gets the payload enqueued
// (Task.Payload, unwrapped); a remote got the envelope's bytes
// ("\xffwqk\x01..."), which no remote can read.
func TestRemoteKeyedTaskPayloadIsUnwrapped(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"keyed": {}}})
	s := open(t, b, "keyed")
	if _, err := b.client.Enqueue(ctx, "keyed", []byte("hello"), &worqr.EnqueueOpts{Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	k := takeOne(t, s, "keyed", 0)
	if string(k.Payload) != "hello" {
		t.Errorf("payload of a keyed task %q, want %q", k.Payload, "hello")
	}
	if _, err := s.Finish(ctx, k.PID, nil); err != nil {
		t.Fatal(err)
	}
}

// Close puts back what the session holds. It retires the session first
// (nothing may act under its id after), then requeued with the caller's
// context: a remote that hung up on its CloseSession (or gave it a short
// deadline) left every taking held, the session unusable, until its
// keepalive expired. A Worker's Stop requeues detached from its context.
func TestRemoteCloseRequeuesWhenItsCallerIsGone(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true, SessionTTL: time.Minute})
	id, err := b.client.Enqueue(ctx, "cq", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "cq")
	takeOne(t, s, "cq", 0)
	gone, cancel := context.WithCancel(ctx)
	cancel() // the remote hung up
	_ = s.Close(gone)
	info, err := b.insp.Task(ctx, "cq", id)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateQueued {
		t.Fatalf("task after the close %s, want queued again (held until the session's keepalive expires, a minute)", info.State)
	}
}

// switchPool is a pool whose server "changes" when the test says so (a
// Sentinel failover as the library sees it: rdb.Switcher).
type switchPool struct {
	*redis.Pool
	n atomic.Uint64
}

func (p *switchPool) Switches() uint64 { return p.n.Load() }

// After a failover a taking may be gone from the new primary (the old one
// acknowledged the take and never passed it on): its task waits there
// again, and another worker takes it. A Worker finds that at the switch
// (its release reads its holdings) and cancels the handler
// (ErrLostInFailover). A remote session never told its remote: its beats
// reported nothing, and the remote ran the task to its end while another
// owner ran it too.
func TestRemoteBeatReportsATakingLostInAFailover(t *testing.T) {
	ctx := context.Background()
	pool := &switchPool{Pool: srv.TagCheckedPool(t)}
	b := setupRemoteOn(t, ctx, pool, remote.Config{Config: worqr.Config{DisableEvents: true}, AnyQueue: true})
	ns := b.ns
	if _, err := b.client.Enqueue(ctx, "fq", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "fq")
	k := takeOne(t, s, "fq", 0)
	if rep, err := s.Beat(ctx, []string{k.PID}); err != nil || len(rep.Cancel) != 0 {
		t.Fatalf("beat before the switch = %+v, %v", rep, err)
	}
	// The new primary's state: the take never happened there.
	conn := srv.Pool().Get()
	defer conn.Close()
	qk := rdb.NewKeys(ns).Queue(rdb.Standalone("fq"))
	if _, err := conn.Do("HDEL", qk.WorkerQueue(s.ID()), k.PID); err != nil {
		t.Fatal(err)
	}
	pool.n.Add(1)
	var rep remote.BeatReply
	for i := 0; i < 3 && len(rep.Cancel) == 0; i++ {
		var err error
		if rep, err = s.Beat(ctx, []string{k.PID}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rep.Cancel) != 1 || rep.Cancel[0] != k.PID {
		t.Fatalf("beats after the switch cancel %v, want [%s]: the remote runs a taking the new primary does not hold", rep.Cancel, k.PID)
	}
	if _, err := s.Finish(ctx, k.PID, nil); !errors.Is(err, remote.ErrNotOwner) {
		t.Errorf("finish of the lost taking = %v, want ErrNotOwner", err)
	}
}

// A Worker's retry and dead events carry the handler's error (EventDead:
// "Err says why"); a remote's Fail and Bury gave a reason that reached
// the task's record and not its event: a follower of the namespace's
// events (the dashboard, Inspector.Follow) saw a remote's tasks die for no
// reason.
func TestRemoteFailEventsCarryTheReason(t *testing.T) {
	ctx := context.Background()
	b := setupRemoteOn(t, ctx, srv.TagCheckedPool(t), remote.Config{Config: worqr.Config{EventLogLength: 100},
		Queues: map[string]worqr.QueueConfig{"eq": {MaxAttempts: 2}}})
	r, in := b.remote, b.insp
	ids, err := b.client.EnqueueBatch(ctx, "eq", [][]byte{[]byte("a"), []byte("b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "eq")
	ks, err := s.Take(ctx, remote.TakeRequest{Queue: "eq", Max: 2})
	if err != nil || len(ks) != 2 {
		t.Fatalf("take = %v, %v", ks, err)
	}
	if out, err := s.Fail(ctx, ks[0].PID, "boom", time.Hour); err != nil || out != worqr.EventRetry {
		t.Fatalf("fail = %q, %v", out, err)
	}
	if out, err := s.Bury(ctx, ks[1].PID, "poison"); err != nil || out != worqr.EventDead {
		t.Fatalf("bury = %q, %v", out, err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = r.Stop(sctx) // publishes what is buffered
	evs, err := in.RecentEvents(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		kind   worqr.EventKind
		reason string
	}{ids[0]: {worqr.EventRetry, "boom"}, ids[1]: {worqr.EventDead, "poison"}}
	seen := 0
	for _, e := range evs {
		w, ok := want[e.TaskID]
		if !ok || e.Kind != w.kind {
			continue
		}
		seen++
		if e.Err == nil || e.Err.Error() != w.reason {
			t.Errorf("%s event of %s has Err %v, want %q", e.Kind, e.TaskID, e.Err, w.reason)
		}
	}
	if seen != 2 {
		t.Fatalf("saw %d of the 2 events in %+v", seen, evs)
	}
}

// A run cancelled while a remote runs its stage is reported to the remote
// by its beats, as a cancelled task is: a remote hears of cancels only
// through Beat (it has no cancel channel), and a beat read the cancel mark
// ('x'), which run_cancel sets on the running stage task and end_run drops
// in the same call (a run's status stands for its mark): the remote's
// stage ran to its end, however long, for a run that was cancelled.
func TestRemoteBeatReportsACancelledRun(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rcan", Stages: []worqr.Stage{{Name: "only"}}}
	b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rcan", Stages: []worqr.Stage{
		{Name: "only", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := b.client.StartRun(ctx, cf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "rcan/only")
	k := takeOne(t, s, "rcan/only", 0)
	if k.TaskID != runID {
		t.Fatalf("took %s, want run %s", k.TaskID, runID)
	}
	if ok, err := b.client.CancelRun(ctx, cf, runID); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	var rep remote.BeatReply
	wait(t, 2*time.Second, "a beat to carry the run's cancel", func() bool {
		if rep, err = s.Beat(ctx, []string{k.PID}); err != nil {
			t.Fatal(err)
		}
		return len(rep.Cancel) > 0
	})
	if len(rep.Cancel) != 1 || rep.Cancel[0] != k.PID {
		t.Fatalf("beat cancels %v, want [%s]: the run's cancel never reached the remote", rep.Cancel, k.PID)
	}
	if out, err := s.Finish(ctx, k.PID, nil); err != nil || out != worqr.EventCancelled {
		t.Errorf("finish of the cancelled run's stage = %q, %v; want cancelled", out, err)
	}
}

// The same through a remote session, whose child fails its run in either
// way: its take of the child queue buries the poison child, or its end
// buries the child it ran (Bury: dead). The session reports the cancels
// of the siblings the run's stop took out.
func TestRemoteHistoryCountsTheSiblingsABuriedChildTookOut(t *testing.T) {
	for _, byEnd := range []bool{false, true} {
		name := map[bool]string{false: "by its take", true: "by its end"}[byEnd]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fl := map[bool]string{false: "rpc", true: "rpe"}[byEnd]
			flow := &worqr.Flow{Name: fl, Stages: []worqr.Stage{
				{Name: "split", Children: map[string]worqr.QueueConfig{"part": {MaxCrashes: 2}}},
			}}
			cfg := remote.Config{Flows: []*worqr.Flow{flow}}
			cfg.EventInterval = 20 * time.Millisecond
			b := setupRemoteOn(t, ctx, srv.TagCheckedPool(t), cfg)
			cf := &worqr.Flow{Name: fl, Stages: []worqr.Stage{
				{Name: "split", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1},
					Children: map[string]worqr.QueueConfig{"part": {Handler: worqr.HandlerFunc(nil), Concurrency: 1}}},
			}}
			if _, err := b.client.StartRun(ctx, cf, nil, nil); err != nil {
				t.Fatal(err)
			}
			s := open(t, b, fl+"/split", fl+"/part")
			k := takeOne(t, s, fl+"/split", 0)
			parts := []worqr.ChildSpec{{Queue: "part"}, {Queue: "part"}, {Queue: "part"}}
			if out, err := s.FanOut(ctx, k.PID, nil, parts); err != nil || out != worqr.EventFannedOut {
				t.Fatalf("fan-out = %q, %v", out, err)
			}
			if byEnd {
				c := takeOne(t, s, fl+"/part", 0)
				if out, err := s.Bury(ctx, c.PID, "no"); err != nil || out != worqr.EventDead {
					t.Fatalf("bury = %q, %v", out, err)
				}
			} else {
				pool := srv.Pool()
				t.Cleanup(func() { pool.Close() })
				conn := pool.Get()
				defer conn.Close()
				kids, err := redis.Strings(conn.Do("LRANGE", b.ns+":{"+fl+"}:q:part", 0, -1))
				if err != nil || len(kids) != 3 {
					t.Fatalf("children waiting: %v %v", kids, err)
				}
				if _, err := conn.Do("HSET", b.ns+":{"+fl+"}:t:"+kids[0], "c", 2); err != nil {
					t.Fatal(err)
				}
				if ks, err := s.Take(ctx, remote.TakeRequest{Queue: fl + "/part", Max: 3}); err != nil || len(ks) != 0 {
					t.Fatalf("take: %+v %v; want the poison child buried, its siblings stopped", ks, err)
				}
			}
			if d, k := deadAndCancelled(t, ctx, b.insp, fl+"/part"); d != 1 || k != 2 {
				t.Errorf("history of %s/part: %d dead, %d cancelled; want 1 dead (the buried child), 2 cancelled (its waiting siblings)", fl, d, k)
			}
		})
	}
}

// A taking a remote holds past its queue's StuckAfter is reported once,
// by the serving process, as a Worker reports its handlers.
func TestStuckTakingsOfASession(t *testing.T) {
	ctx := context.Background()
	cfg := remote.Config{Queues: map[string]worqr.QueueConfig{"q": {StuckAfter: 50 * time.Millisecond}}, SessionTTL: time.Second}
	cfg.EventInterval, cfg.EventLogLength = 20*time.Millisecond, 100
	b := setupRemoteOn(t, ctx, srv.TagCheckedPool(t), cfg)
	id, err := b.client.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	k := takeOne(t, s, "q", time.Second)
	t.Run("reported with its task, pid, session and how long it was held", func(t *testing.T) {
		var e *worqr.Event
		wait(t, 10*time.Second, "an EventStuck in the event log", func() bool {
			if _, err := s.Beat(ctx, nil); err != nil {
				t.Fatal(err)
			}
			evs, err := b.insp.RecentEvents(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			for i := range evs {
				if evs[i].Kind == worqr.EventStuck {
					e = &evs[i]
				}
			}
			return e != nil
		})
		if e.TaskID != id || e.PID != k.PID || e.WorkerID != s.ID() || e.Queue != "q" || e.Running < 50*time.Millisecond {
			t.Fatalf("EventStuck %+v, want task %s pid %s of session %s, held 50ms or more", e, id, k.PID, s.ID())
		}
	})
	if _, err := s.Finish(ctx, k.PID, nil); err != nil {
		t.Fatal(err)
	}
}

// A remote ends a stage with a durable timer as a Go stage does
// (ForwardAfter: StageResult.Sleep and Again): the run sleeps in its next
// stage's scheduled set, or in its own with again; a sleep that cannot
// work is refused naming the field, the taking still held.
func TestRemoteForwardAfter(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rs", Stages: []worqr.Stage{{Name: "wait"}, {Name: "check"}}}
	b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rs", Stages: []worqr.Stage{
		{Name: "wait", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
		{Name: "check", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := b.client.StartRun(ctx, cf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "rs/wait", "rs/check")
	k := takeOne(t, s, "rs/wait", 0)
	if _, err := s.ForwardAfter(ctx, k.PID, nil, -time.Second, false, ""); invalidField(t, "a negative sleep", err) != "sleep" {
		t.Fatalf("a negative sleep: %v, want the field named sleep", err)
	}
	if out, err := s.ForwardAfter(ctx, k.PID, map[string]string{"a": "1"}, time.Hour, false, ""); err != nil || out != worqr.EventForwarded {
		t.Fatalf("ForwardAfter = %q, %v; want forwarded", out, err)
	}
	info, err := b.insp.Run(ctx, "rs", runID)
	if err != nil || info.Stage != "check" || info.TaskState != "scheduled" || info.State["a"] != "1" {
		t.Fatalf("run %+v, %v: want it asleep before check, with its field", info, err)
	}
	task, err := b.insp.Task(ctx, "rs/check", runID)
	if err != nil || time.Until(task.DueAt) < 59*time.Minute {
		t.Fatalf("check due %v, %v: want in an hour", task.DueAt, err)
	}
	if ok, err := b.insp.RunNow(ctx, "rs/check", runID); err != nil || !ok {
		t.Fatalf("RunNow = %v, %v", ok, err)
	}
	c := takeOne(t, s, "rs/check", 0)
	if out, err := s.ForwardAfter(ctx, c.PID, nil, time.Hour, true, "paid"); err != nil || out != worqr.EventForwarded {
		t.Fatalf("ForwardAfter again = %q, %v; want forwarded", out, err)
	}
	if info, err = b.insp.Run(ctx, "rs", runID); err != nil || info.Stage != "check" || info.TaskState != "scheduled" {
		t.Fatalf("run %+v, %v: want it asleep before check again", info, err)
	}
	// It awaits signal paid: a signal moves it on, its payload in the state.
	if now, err := b.client.Signal(ctx, cf, runID, "paid", []byte("yes"), ""); err != nil || !now {
		t.Fatalf("Signal = %v, %v; want delivered", now, err)
	}
	if k := takeOne(t, s, "rs/check", 0); k.State["paid"] != "yes" {
		t.Fatalf("check taken with state %v, want paid=yes", k.State)
	}
}

// A remote serves a join (worqr.Stage.Branches) as a Worker does: the
// session fans a join's stage out into its branches itself, a branch's
// taking comes with its run's state, its Forward merges fields into the
// run (and nothing else: sleep, again, await and children are refused by
// name), and the join's stage is then taken once with every branch's
// fields; on any, the first branch done cancels the others.
func TestRemoteJoin(t *testing.T) {
	ctx := context.Background()
	nop := worqr.StageHandlerFunc(nil)
	one := worqr.QueueConfig{Concurrency: 1}
	joinFlow := func(name string, any bool, stages ...string) *worqr.Flow {
		f := &worqr.Flow{Name: name}
		for _, st := range stages {
			f.Stages = append(f.Stages, worqr.Stage{Name: st, Handler: nop, Queue: one})
		}
		j := &f.Stages[len(f.Stages)-1]
		if len(stages) > 1 {
			j = &f.Stages[1]
		}
		j.JoinAny = any
		j.Branches = map[string]worqr.Branch{"b1": {Handler: nop, Queue: one}, "b2": {Handler: nop, Queue: one}}
		return f
	}
	take := func(t *testing.T, s *remote.Session, queue string) []remote.Taking {
		t.Helper()
		ks, err := s.Take(ctx, remote.TakeRequest{Queue: queue, Max: 4})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}

	t.Run("all: the join runs once with every branch's fields", func(t *testing.T) {
		f := joinFlow("rj", false, "a", "j", "e")
		b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{f}})
		runID, err := b.client.StartRun(ctx, f, map[string]string{"x": "1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := open(t, b, "rj/a", "rj/j", "rj/b1", "rj/b2", "rj/e")
		if _, err := s.Forward(ctx, takeOne(t, s, "rj/a", time.Second).PID, map[string]string{"a": "A"}); err != nil {
			t.Fatal(err)
		}
		if ks := take(t, s, "rj/j"); len(ks) != 0 {
			t.Fatalf("the join's stage handed out %+v before its branches ran", ks)
		}
		info, err := b.insp.Run(ctx, "rj", runID)
		if err != nil || info.TaskState != "children" || len(info.Children) != 2 {
			t.Fatalf("run %+v, %v: want it waiting for its two branches", info, err)
		}
		for _, q := range []string{"b1", "b2"} {
			k := takeOne(t, s, "rj/"+q, time.Second)
			if k.State["x"] != "1" || k.State["a"] != "A" || k.Parent != runID {
				t.Fatalf("branch %s taken with state %v, parent %s: want the run's", q, k.State, k.Parent)
			}
			if _, err := s.ForwardAfter(ctx, k.PID, nil, time.Second, false, ""); invalidField(t, "a branch's sleep", err) != "sleep" {
				t.Fatalf("a branch's sleep: %v, want the field named sleep", err)
			}
			if _, err := s.FanOut(ctx, k.PID, nil, []worqr.ChildSpec{{Queue: "b1"}}); invalidField(t, "a branch's children", err) != "children" {
				t.Fatalf("a branch's children: %v, want the field named children", err)
			}
			if out, err := s.Forward(ctx, k.PID, map[string]string{q: "done by " + q}); err != nil || out != worqr.EventDone {
				t.Fatalf("branch %s Forward = %q, %v; want done", q, out, err)
			}
		}
		j := takeOne(t, s, "rj/j", time.Second)
		if j.State["b1"] != "done by b1" || j.State["b2"] != "done by b2" || j.State["a"] != "A" || len(j.Children) != 2 {
			t.Fatalf("the join taken with state %v, children %+v: want both branches' fields", j.State, j.Children)
		}
		if _, err := s.Forward(ctx, j.PID, map[string]string{"j": "J"}); err != nil {
			t.Fatal(err)
		}
		if ks := take(t, s, "rj/j"); len(ks) != 0 {
			t.Fatalf("the join ran again: %+v", ks)
		}
		e := takeOne(t, s, "rj/e", time.Second)
		if e.State["j"] != "J" {
			t.Fatalf("e taken with state %v", e.State)
		}
		if _, err := s.Forward(ctx, e.PID, nil); err != nil {
			t.Fatal(err)
		}
		if info, err := b.insp.Run(ctx, "rj", runID); err != nil || info.Status != worqr.RunDone {
			t.Fatalf("run %+v, %v: want done", info, err)
		}
	})

	t.Run("any: the first branch done cancels the other", func(t *testing.T) {
		f := joinFlow("ra", true, "j")
		b := setupRemote(t, ctx, remote.Config{Flows: []*worqr.Flow{f}})
		runID, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := open(t, b, "ra/j", "ra/b1", "ra/b2")
		if ks := take(t, s, "ra/j"); len(ks) != 0 {
			t.Fatalf("the join's stage handed out %+v before its branches ran", ks)
		}
		k := takeOne(t, s, "ra/b2", time.Second)
		if _, err := s.Forward(ctx, k.PID, map[string]string{"won": "b2"}); err != nil {
			t.Fatal(err)
		}
		if ks := take(t, s, "ra/b1"); len(ks) != 0 {
			t.Fatalf("b1 handed out after b2 won: %+v", ks)
		}
		j := takeOne(t, s, "ra/j", time.Second)
		if j.State["won"] != "b2" {
			t.Fatalf("the join taken with state %v, want b2's field", j.State)
		}
		if _, err := s.Forward(ctx, j.PID, nil); err != nil {
			t.Fatal(err)
		}
		if info, err := b.insp.Run(ctx, "ra", runID); err != nil || info.Status != worqr.RunDone {
			t.Fatalf("run %+v, %v: want done", info, err)
		}
	})
}

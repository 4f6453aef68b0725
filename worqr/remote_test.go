package worqr_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// remoteBundle is a started Remote, a Client and an Inspector on one fresh
// namespace.
type remoteBundle struct {
	remote *worqr.Remote
	client *worqr.Client
	insp   *worqr.Inspector
	ns     string
}

func setupRemote(t *testing.T, ctx context.Context, cfg worqr.RemoteConfig) *remoteBundle {
	t.Helper()
	cfg.DisableEvents = true
	return setupRemoteOn(t, ctx, srv.TagCheckedPool(t), cfg)
}

// setupRemoteOn is setupRemote on pool, its events as cfg says.
func setupRemoteOn(t *testing.T, ctx context.Context, pool worqr.ConnGetter, cfg worqr.RemoteConfig) *remoteBundle {
	t.Helper()
	ns := redistest.Namespace()
	cfg.Namespace = ns
	r, err := worqr.NewRemote(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = r.Stop(sctx)
	})
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	return &remoteBundle{remote: r, client: c, insp: in, ns: ns}
}

func open(t *testing.T, b *remoteBundle, queues ...string) *worqr.RemoteSession {
	t.Helper()
	s, err := b.remote.Open(context.Background(), worqr.OpenOpts{Name: t.Name(), Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func takeOne(t *testing.T, s *worqr.RemoteSession, queue string, wait time.Duration) worqr.Taking {
	t.Helper()
	ks, err := s.Take(context.Background(), worqr.TakeRequest{Queue: queue, Max: 1, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 1 {
		t.Fatalf("took %d tasks, want 1", len(ks))
	}
	return ks[0]
}

func TestRemoteFinishIsIdempotentByPID(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"q": {Retention: time.Minute}}})
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
	if _, err := s.Fail(ctx, k.PID, "late", 0); !errors.Is(err, worqr.ErrNotOwner) {
		t.Errorf("fail after finish = %v, want ErrNotOwner", err)
	}
	if _, err := s.GiveBack(ctx, "nosuchpid"); !errors.Is(err, worqr.ErrNotOwner) {
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
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true})
	if _, err := b.client.EnqueueBatch(ctx, "q", [][]byte{[]byte("a"), []byte("b")}, nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q", "q2")
	req := worqr.TakeRequest{Queue: "q", Max: 1, RequestID: "r1"}
	first, err := s.Take(ctx, req)
	if err != nil || len(first) != 1 {
		t.Fatalf("take = %v, %v", first, err)
	}
	again, err := s.Take(ctx, req)
	if err != nil || len(again) != 1 || again[0].PID != first[0].PID {
		t.Fatalf("repeated take = %v, %v; want the same taking %s", again, err, first[0].PID)
	}
	for _, c := range []struct {
		req   worqr.TakeRequest
		field string
	}{
		{worqr.TakeRequest{Queue: "other", Max: 1}, "queue"},
		{worqr.TakeRequest{Queue: "q", Max: 0}, "max"},
		{worqr.TakeRequest{Queue: "q", Max: 1, Wait: time.Hour}, "wait"},
		{worqr.TakeRequest{Queue: "q", Max: 1, RequestID: "a b"}, "request_id"},
		// The id of a take of q, for another queue: it answered q's
		// takings as q2's.
		{worqr.TakeRequest{Queue: "q2", Max: 1, RequestID: "r1"}, "request_id"},
	} {
		_, err := s.Take(ctx, c.req)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("take %+v = %v, want an InvalidError on %s", c.req, err, c.field)
		}
	}
	if _, err := b.remote.Open(ctx, worqr.OpenOpts{Queues: []string{"bad name"}}); err == nil || !strings.Contains(err.Error(), "queues[0]") {
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
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute},
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
	ks, err := live.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1, Wait: 10 * time.Second})
	if err != nil || len(ks) != 1 {
		t.Fatalf("the live session took %v, %v; want the recovered task", ks, err)
	}
	if ks[0].TaskID != id || ks[0].PID == old.PID || ks[0].Crashes != 1 {
		t.Fatalf("retaken %+v, want task %s under a new pid with one crash", ks[0], id)
	}
	if _, err := zombie.Finish(ctx, old.PID, []byte("zombie")); !errors.Is(err, worqr.ErrNotOwner) {
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

// A session whose remote has not beaten for SessionTTL refuses every call at
// once, without asking Redis.
func TestRemoteStaleSessionIsLost(t *testing.T) {
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true, SessionTTL: time.Second})
	if _, err := b.client.Enqueue(ctx, "q", nil, nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	k := takeOne(t, s, "q", 0)
	if _, err := b.client.Enqueue(ctx, "q", nil, nil); err != nil {
		t.Fatal(err)
	}
	k2 := takeOne(t, s, "q", 0)
	if _, err := s.Finish(ctx, k2.PID, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	// An end repeated after the session was lost (its first reply lost)
	// still gets its recorded answer, through the lookup a gateway uses.
	again, err := b.remote.Session(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := again.Finish(ctx, k2.PID, nil); err != nil || out != worqr.EventDone {
		t.Errorf("repeated finish after the loss = %q, %v; want done as recorded", out, err)
	}
	if _, err := s.Finish(ctx, k.PID, nil); !errors.Is(err, worqr.ErrSessionLost) || !errors.Is(err, worqr.ErrNotOwner) {
		t.Errorf("finish on a stale session = %v, want ErrSessionLost (an ErrNotOwner)", err)
	}
	if _, err := s.Beat(ctx, nil); !errors.Is(err, worqr.ErrSessionLost) {
		t.Errorf("beat on a stale session = %v, want ErrSessionLost", err)
	}
	if _, err := s.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1}); !errors.Is(err, worqr.ErrSessionLost) {
		t.Errorf("take on a lost session = %v, want ErrSessionLost", err)
	}
	if _, err := b.remote.Session("nosuchsession"); !errors.Is(err, worqr.ErrSessionLost) {
		t.Errorf("Session(unknown id) = %v, want ErrSessionLost", err)
	}
}

func TestRemoteBeatReportsCancelsAndOrphans(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute}})
	ids, err := b.client.EnqueueBatch(ctx, "q", [][]byte{[]byte("a"), []byte("b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 2})
	if err != nil || len(ks) != 2 {
		t.Fatalf("take = %v, %v", ks, err)
	}
	if st, err := b.client.Cancel(ctx, "q", ks[0].TaskID); err != nil || st != worqr.CancelRequested {
		t.Fatalf("cancel = %v, %v", st, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var rep worqr.BeatReply
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
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true})
	id, err := b.client.Enqueue(ctx, "q", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "q")
	k := takeOne(t, s, "q", 0)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, k.PID, nil); !errors.Is(err, worqr.ErrNotOwner) {
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
	b := setupRemote(t, ctx, worqr.RemoteConfig{Flows: []*worqr.Flow{flow}})
	client := b.client
	// The Client needs a complete flow (with handlers) to start runs.
	cf := &worqr.Flow{Name: "rf", Stages: []worqr.Stage{
		{Name: "split", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"part": {Handler: worqr.HandlerFunc(nil), Concurrency: 1}}},
		{Name: "join", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := client.StartRun(ctx, cf, map[string]string{"n": "2"})
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

	run2, err := client.StartRun(ctx, cf, nil)
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

// lossyConn loses the reply of the next armed script calls that match:
// Redis applied them, the caller gets an error (a connection that died
// while the reply was on its way).
type lossyConn struct {
	redis.Conn
	armed *atomic.Int32
	match func(args []any) bool
}

func (c *lossyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	if err == nil && (cmd == "EVALSHA" || cmd == "EVAL" || cmd == "FCALL") && c.match(args) && c.armed.Add(-1) >= 0 {
		return nil, errors.New("injected: the reply was lost")
	}
	return r, err
}

func (c *lossyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c *lossyConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *lossyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// hasArg matches a script call with argument v.
func hasArg(v string) func(args []any) bool {
	return func(args []any) bool {
		for _, a := range args {
			if s, ok := a.(string); ok && s == v {
				return true
			}
		}
		return false
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
		return &lossyConn{Conn: c, armed: &armed, match: func(args []any) bool { return (*match.Load())(args) }}, nil
	}}
	defer pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	r, err := worqr.NewRemote(pool, &worqr.RemoteConfig{Config: cfg, AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute}})
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
	c, _ := worqr.NewClient(pool, &cfg)
	in := newInspector(t, pool, &cfg)
	id, err := c.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Open(ctx, worqr.OpenOpts{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}

	// A take whose reply is lost: its taking is released before the next
	// take, which gets the task again under a new pid.
	takeMatch := hasArg(s.ID())
	match.Store(&takeMatch)
	armed.Store(1)
	if ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1}); err == nil {
		t.Fatalf("take with its reply lost = %v, want an error", ks)
	}
	k := takeOne(t, s, "q", 0)
	if k.TaskID != id || k.Crashes != 0 {
		t.Fatalf("retake %+v, want task %s with no crash", k, id)
	}

	// An end whose reply is lost after Redis applied it answers done,
	// and so does its repeat.
	endMatch := hasArg("done")
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
	_, err := worqr.NewRemote(pool, &worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"q": {KeyBatch: 4}}})
	if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), `Queues["q"].KeyBatch`) {
		t.Fatalf("NewRemote with KeyBatch = %v; want ErrInvalid naming Queues[\"q\"].KeyBatch", err)
	}
}

// A task taken past its deadline is not handed to the remote: the session
// ends it as expired, as a Worker does, and the take goes on to the next.
func TestRemoteExpiredIsNotHanded(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"q": {Retention: time.Minute}}})
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

// A Worker's end whose reply is lost after Redis applied it, for a task
// whose cancel was asked while it ran: the end recorded it cancelled, and
// so says the worker's event, not the done its handler asked for.
func TestWorkerLostEndReplyOfACancelledTask(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: c, armed: &armed, match: hasArg("done")}, nil
	}}
	defer pool.Close()
	events := make(chan worqr.Event, 100)
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	started := make(chan struct{}, 1)
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, OnEvent: func(e worqr.Event) {
		if e.Kind == worqr.EventDone || e.Kind == worqr.EventCancelled || e.Kind == worqr.EventLost {
			events <- e
		}
	},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(hctx context.Context, _ *worqr.Task) error {
				started <- struct{}{}
				<-hctx.Done()  // the cancel
				armed.Store(1) // the end's reply is lost
				return nil
			})}}})
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	id, err := c.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if st, err := c.Cancel(ctx, "q", id); err != nil || st != worqr.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", st, err)
	}
	select {
	case e := <-events:
		if e.Kind != worqr.EventCancelled || e.TaskID != id {
			t.Fatalf("event %s of %s, want cancelled of %s", e.Kind, e.TaskID, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no end event")
	}
	if armed.Load() >= 0 {
		t.Fatal("no reply was lost: the test did not test anything")
	}
	if info, err := in.Task(ctx, "q", id); err != nil || info.State != worqr.StateCancelled {
		t.Fatalf("task = %+v, %v; want cancelled", info, err)
	}
}

// While the Remote drains, a take hands out nothing and waits out its wait
// (a remote that takes again at once would spin through the grace period),
// and returns when the Remote has stopped.
func TestRemoteDrainingTakeWaits(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"q": {}}})
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
	for !b.remote.Draining() {
		time.Sleep(time.Millisecond)
	}
	if _, err := b.client.Enqueue(ctx, "q", []byte("y"), nil); err != nil {
		t.Fatal(err)
	}
	const wait = 300 * time.Millisecond
	start := time.Now()
	ks, err := idle.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1, Wait: wait})
	if err != nil || len(ks) != 0 {
		t.Fatalf("take while draining = %v, %v; want nothing", ks, err)
	}
	if d := time.Since(start); d < wait {
		t.Fatalf("take while draining returned after %s, before its %s wait", d, wait)
	}
	// A longer wait ends when the Remote has stopped (the holder finishes).
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = idle.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1, Wait: 20 * time.Second})
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
		t.Fatal("a take waiting while the Remote drained did not return once it stopped")
	}
}

// A session that holds MaxHeld takings is told so (ErrTooManyHeld, which
// the gateway answers resource_exhausted), not that its request was bad.
func TestRemoteTakeBeyondMaxHeld(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{MaxHeld: 1, Queues: map[string]worqr.QueueConfig{"q": {}}})
	for i := 0; i < 2; i++ {
		if _, err := b.client.Enqueue(ctx, "q", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, b, "q")
	takeOne(t, s, "q", 0)
	if _, err := s.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1}); !errors.Is(err, worqr.ErrTooManyHeld) || errors.Is(err, worqr.ErrInvalid) {
		t.Fatalf("take beyond MaxHeld = %v, want ErrTooManyHeld", err)
	}
}

// What a remote's or a flow's queue would silently ignore is refused,
// naming the field: a priority Weight. A remote's Limits are checked as a
// Worker's are.
func TestQueueSettingsThatWouldBeIgnored(t *testing.T) {
	pool := srv.TagCheckedPool(t)
	for field, cfg := range map[string]worqr.RemoteConfig{
		`Queues["q"].Weight`: {Queues: map[string]worqr.QueueConfig{"q": {Weight: 2}}},
		`Queues["q"].Limits`: {Queues: map[string]worqr.QueueConfig{"q": {Limits: &worqr.Limits{Rate: 1}}}},
	} {
		if _, err := worqr.NewRemote(pool, &cfg); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("NewRemote with %s: %v, want ErrInvalid naming it", field, err)
		}
	}
	flow := &worqr.Flow{Name: "f", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1, Weight: 2},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })}}}
	if _, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Flows: []*worqr.Flow{flow}}); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "Queue.Weight") {
		t.Errorf("a flow stage with a Weight: %v, want ErrInvalid naming its Queue.Weight", err)
	}
}

// The Remote follows the lifecycle every long-running type shares
// (internal/startstop), and has Stopped as they do.
func TestRemoteLifecycle(t *testing.T) {
	ctx := context.Background()
	newRemote := func(t *testing.T) *worqr.Remote {
		t.Helper()
		r, err := worqr.NewRemote(srv.TagCheckedPool(t), &worqr.RemoteConfig{
			Config: worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}, AnyQueue: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	stoppedWithin := func(t *testing.T, r *worqr.Remote) {
		t.Helper()
		select {
		case <-r.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("Stopped not closed")
		}
	}

	t.Run("StartTwiceIsAnError", func(t *testing.T) {
		b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true})
		if err := b.remote.Start(ctx); err == nil || err.Error() != "worqr: remote already started" {
			t.Fatalf("second Start = %v, want worqr: remote already started", err)
		}
	})

	// A Stop before Start (a signal during the gateway's setup) is final,
	// as a Worker's is: before, it was forgotten and a later Start ran a
	// Remote whose Stop had returned, with nobody left to stop it.
	t.Run("StopBeforeStartIsFinal", func(t *testing.T) {
		r := newRemote(t)
		if err := r.Stop(ctx); err != nil {
			t.Fatalf("Stop before Start = %v, want nil", err)
		}
		stoppedWithin(t, r)
		err := r.Start(ctx)
		if err == nil {
			_ = r.Stop(ctx)
		}
		if err == nil || err.Error() != "worqr: remote stopped before it was started" {
			t.Fatalf("Start after Stop = %v, want worqr: remote stopped before it was started", err)
		}
		if _, err := r.Open(ctx, worqr.OpenOpts{Name: "late", Queues: []string{"q"}}); err == nil {
			t.Error("Open on a Remote stopped before Start = nil")
		}
	})

	t.Run("StoppedIsClosedOnceStopped", func(t *testing.T) {
		r := newRemote(t)
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.Stopped():
			t.Fatal("Stopped closed while running")
		default:
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		first := r.Stop(done) // nothing held: nil, or Canceled if the select saw ctx first
		stoppedWithin(t, r)
		if err := r.Stop(ctx); err != first {
			t.Errorf("second Stop = %v, want the first's result %v", err, first)
		}
	})
}

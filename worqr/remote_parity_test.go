package worqr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// A session that takes from two stand-alone queues gets the same pid from
// both: pids count up per tag, and each stand-alone queue is a tag of its
// own. The session kept its takings by pid alone, so the second taking
// replaced the first: the remote's Finish of the first taking ended the
// second's task (the wrong task, with the wrong result), and the first
// taking stayed held, out of reach of every end, beat and cancel, until the
// session ended. A Worker keeps each queue's takings apart.
func TestRemoteTakingsOfTwoQueuesAreKeptApart(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true, DefaultQueue: worqr.QueueConfig{Retention: time.Minute}})
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
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"keyed": {}}})
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
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true, SessionTTL: time.Minute})
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
	b := setupRemoteOn(t, ctx, pool, worqr.RemoteConfig{Config: worqr.Config{DisableEvents: true}, AnyQueue: true})
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
	var rep worqr.BeatReply
	for i := 0; i < 3 && len(rep.Cancel) == 0; i++ {
		var err error
		if rep, err = s.Beat(ctx, []string{k.PID}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rep.Cancel) != 1 || rep.Cancel[0] != k.PID {
		t.Fatalf("beats after the switch cancel %v, want [%s]: the remote runs a taking the new primary does not hold", rep.Cancel, k.PID)
	}
	if _, err := s.Finish(ctx, k.PID, nil); !errors.Is(err, worqr.ErrNotOwner) {
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
	b := setupRemoteOn(t, ctx, srv.TagCheckedPool(t), worqr.RemoteConfig{Config: worqr.Config{EventLogLength: 100},
		Queues: map[string]worqr.QueueConfig{"eq": {MaxAttempts: 2}}})
	r, in := b.remote, b.insp
	ids, err := b.client.EnqueueBatch(ctx, "eq", [][]byte{[]byte("a"), []byte("b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "eq")
	ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "eq", Max: 2})
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

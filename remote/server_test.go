package remote_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// A session whose remote has not beaten for SessionTTL refuses every call at
// once, without asking Redis.
func TestRemoteStaleSessionIsLost(t *testing.T) {
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true, SessionTTL: time.Second})
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
	if _, err := s.Finish(ctx, k.PID, nil); !errors.Is(err, remote.ErrSessionLost) || !errors.Is(err, remote.ErrNotOwner) {
		t.Errorf("finish on a stale session = %v, want ErrSessionLost (an ErrNotOwner)", err)
	}
	if _, err := s.Beat(ctx, nil); !errors.Is(err, remote.ErrSessionLost) {
		t.Errorf("beat on a stale session = %v, want ErrSessionLost", err)
	}
	if _, err := s.Take(ctx, remote.TakeRequest{Queue: "q", Max: 1}); !errors.Is(err, remote.ErrSessionLost) {
		t.Errorf("take on a lost session = %v, want ErrSessionLost", err)
	}
	if _, err := b.remote.Session("nosuchsession"); !errors.Is(err, remote.ErrSessionLost) {
		t.Errorf("Session(unknown id) = %v, want ErrSessionLost", err)
	}
}

// What a remote's or a flow's queue would silently ignore is refused,
// naming the field: a priority Weight. A remote's Limits are checked as a
// Worker's are.
func TestQueueSettingsThatWouldBeIgnored(t *testing.T) {
	pool := srv.TagCheckedPool(t)
	for field, cfg := range map[string]remote.Config{
		`Queues["q"].Weight`: {Queues: map[string]worqr.QueueConfig{"q": {Weight: 2}}},
		`Queues["q"].Limits`: {Queues: map[string]worqr.QueueConfig{"q": {Limits: &worqr.Limits{Rate: 1}}}},
	} {
		if _, err := remote.NewServer(pool, &cfg); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("NewServer with %s: %v, want ErrInvalid naming it", field, err)
		}
	}
	flow := &worqr.Flow{Name: "f", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1, Weight: 2},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })}}}
	if _, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Flows: []*worqr.Flow{flow}}); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "Queue.Weight") {
		t.Errorf("a flow stage with a Weight: %v, want ErrInvalid naming its Queue.Weight", err)
	}
}

// The Server follows the lifecycle every long-running type shares
// (internal/startstop), and has Stopped as they do.
func TestRemoteLifecycle(t *testing.T) {
	ctx := context.Background()
	newRemote := func(t *testing.T) *remote.Server {
		t.Helper()
		r, err := remote.NewServer(srv.TagCheckedPool(t), &remote.Config{
			Config: worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}, AnyQueue: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	stoppedWithin := func(t *testing.T, r *remote.Server) {
		t.Helper()
		select {
		case <-r.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("Stopped not closed")
		}
	}

	t.Run("StartTwiceIsAnError", func(t *testing.T) {
		b := setupRemote(t, ctx, remote.Config{AnyQueue: true})
		if err := b.remote.Start(ctx); err == nil || err.Error() != "worqr: remote already started" {
			t.Fatalf("second Start = %v, want worqr: remote already started", err)
		}
	})

	// A Stop before Start (a signal during the gateway's setup) is final,
	// as a Worker's is: before, it was forgotten and a later Start ran a
	// Server whose Stop had returned, with nobody left to stop it.
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
		if _, err := r.Open(ctx, remote.OpenOpts{Name: "late", Queues: []string{"q"}}); err == nil {
			t.Error("Open on a Server stopped before Start = nil")
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

// With AnyQueue (the CLI gateway's default), every queue name a session
// ever named stayed in the Server for the life of the process: subscribed
// to, and read once per PollInterval (one round trip per stand-alone
// queue, in series, under one 5 s bound for them all). Names come from
// remotes: one caller opening sessions over fresh names (100 a call, even
// when MaxSessions refuses the open) grows the set without bound. Once no
// open session names a queue, the Server lets it go.
func TestRemoteForgetsQueuesNoSessionNames(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{AnyQueue: true, SessionTTL: 300 * time.Millisecond,
		ReaperInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	keys := rdb.NewKeys(b.ns)
	var channels []any
	for round := 0; round < 3; round++ {
		names := make([]string, 100)
		for i := range names {
			names[i] = fmt.Sprintf("tenant-%d-%d", round, i)
			channels = append(channels, keys.Queue(rdb.Standalone(names[i])).WakeChannel)
		}
		s := open(t, b, names...)
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	conn := srv.Pool().Get()
	defer conn.Close()
	subscribed := func() int {
		vals, err := redis.Values(conn.Do("PUBSUB", append([]any{"NUMSUB"}, channels...)...))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := 1; i < len(vals); i += 2 {
			if c, _ := redis.Int(vals[i], nil); c > 0 {
				n++
			}
		}
		return n
	}
	var n int
	wait(t, 3*time.Second, "the queues of closed sessions to be unsubscribed", func() bool {
		n = subscribed()
		return n == 0
	})
	if n > 0 {
		t.Errorf("%d of the %d queues of closed sessions are still subscribed (and polled) 3 s after the last one closed", n, len(channels))
	}
}

func TestNewServerValidatesFlows(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	remoteFlow := &worqr.Flow{Name: "twice", Stages: []worqr.Stage{{Name: "a"}}}
	for _, c := range []struct {
		name  string
		flows []*worqr.Flow
		field string
	}{
		{"refuses a nil flow", []*worqr.Flow{nil}, "Flows[0]"},
		{"refuses a flow served twice", []*worqr.Flow{remoteFlow, remoteFlow}, "Flows[1]"},
		{"refuses a branch named as a stage", []*worqr.Flow{{Name: "join", Stages: []worqr.Stage{{Name: "a"},
			{Name: "j", Branches: map[string]worqr.Branch{"a": {}}}}}}, "Flow[\"join\"].Stages[1].Branches[\"a\"]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := remote.NewServer(pool, &remote.Config{Flows: c.flows})
			if f := invalidField(t, "NewServer", err); f != c.field {
				t.Fatalf("err %v, want an InvalidError of %s", err, c.field)
			}
		})
	}
	t.Run("a flow needs no handlers", func(t *testing.T) {
		if _, err := remote.NewServer(pool, &remote.Config{Flows: []*worqr.Flow{remoteFlow}}); err != nil {
			t.Fatal(err)
		}
	})
}

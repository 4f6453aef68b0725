package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// authed adds the bearer token to every call.
type authed struct{ rt http.RoundTripper }

func (a authed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return a.rt.RoundTrip(r)
}

// clients returns a client per protocol the gateway serves on its one port:
// gRPC over cleartext HTTP/2, gRPC-Web and Connect JSON.
func clients(g *gw) map[string]gatewayv1connect.GatewayServiceClient {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: authed{&http.Transport{Protocols: p}}}
	h1 := &http.Client{Transport: authed{http.DefaultTransport}}
	return map[string]gatewayv1connect.GatewayServiceClient{
		"grpc":     gatewayv1connect.NewGatewayServiceClient(h2c, g.url, connect.WithGRPC()),
		"grpc-web": gatewayv1connect.NewGatewayServiceClient(h1, g.url, connect.WithGRPCWeb()),
		"json":     gatewayv1connect.NewGatewayServiceClient(h1, g.url, connect.WithProtoJSON()),
	}
}

func TestProtocolsAndErrors(t *testing.T) {
	g := startGateway(t, 2*time.Second)
	ctx := context.Background()
	for proto, c := range clients(g) {
		t.Run(proto, func(t *testing.T) {
			q := "q-" + proto
			enq, err := c.Enqueue(ctx, connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: q, Payload: []byte("p")}))
			if err != nil {
				t.Fatal(err)
			}
			open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Name: proto, Queues: []string{q}}))
			if err != nil {
				t.Fatal(err)
			}
			sid := open.Msg.SessionId
			if open.Msg.TtlMs != 2000 || open.Msg.BeatMs == 0 {
				t.Errorf("open = %+v", open.Msg)
			}
			take, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: q, Max: 5, WaitMs: 1000}))
			if err != nil || len(take.Msg.Takings) != 1 || take.Msg.Takings[0].TaskId != enq.Msg.Id {
				t.Fatalf("take = %v, %v", take, err)
			}
			pid := take.Msg.Takings[0].Pid
			if _, err := c.Beat(ctx, connect.NewRequest(&gatewayv1.BeatRequest{SessionId: sid})); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ { // a repeat after a lost reply answers the same
				fin, err := c.Finish(ctx, connect.NewRequest(&gatewayv1.FinishRequest{SessionId: sid, Pid: pid, Result: []byte("r")}))
				if err != nil || fin.Msg.Outcome != "done" {
					t.Fatalf("finish #%d = %v, %v", i+1, fin, err)
				}
			}
			_, err = c.Fail(ctx, connect.NewRequest(&gatewayv1.FailRequest{SessionId: sid, Pid: pid, Error: "late"}))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("fail after finish = %v, want failed_precondition", err)
			}
			_, err = c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: q, WaitMs: 60000}))
			if field := violation(t, err); field != "waitMs" || !strings.Contains(err.Error(), "waitMs (1m0s) must be") {
				t.Errorf("take with a 60 s wait = %v (field %q), want invalid_argument on waitMs, the request's name", err, field)
			}
			_, err = c.Enqueue(ctx, connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: "bad queue"}))
			if field := violation(t, err); field != "queue" {
				t.Errorf("enqueue to a bad name = %v (field %q), want queue", err, field)
			}
			_, err = c.Enqueue(ctx, connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: q, UniqueTtlMs: 1000}))
			if field := violation(t, err); field != "uniqueKey" {
				t.Errorf("enqueue with a unique TTL and no key = %v (field %q), want uniqueKey", err, field)
			}
			got, err := c.GetTask(ctx, connect.NewRequest(&gatewayv1.GetTaskRequest{Queue: q, Id: enq.Msg.Id}))
			if err != nil || got.Msg.Task.State != "done" || string(got.Msg.Task.Result) != "r" {
				t.Fatalf("get = %v, %v", got, err)
			}
			if _, err := c.CloseSession(ctx, connect.NewRequest(&gatewayv1.CloseSessionRequest{SessionId: sid})); err != nil {
				t.Fatal(err)
			}
			_, err = c.Beat(ctx, connect.NewRequest(&gatewayv1.BeatRequest{SessionId: sid}))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("beat after close = %v, want failed_precondition", err)
			}
		})
	}
	noToken := gatewayv1connect.NewGatewayServiceClient(http.DefaultClient, g.url, connect.WithProtoJSON())
	_, err := noToken.QueueStats(ctx, connect.NewRequest(&gatewayv1.QueueStatsRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("call without the token = %v, want unauthenticated", err)
	}
	if st, code := g.call(t, "Finish", map[string]any{"sessionId": "nope", "pid": "1"}, nil); st != 409 || code != "failed_precondition" {
		t.Errorf("JSON finish on an unknown session = %d %s, want 409 failed_precondition", st, code)
	}
	if st, code := g.call(t, "Enqueue", map[string]any{"queue": "bad queue", "payload": "eA=="}, nil); st != 400 || code != "invalid_argument" {
		t.Errorf("JSON enqueue to a bad queue name = %d %s, want 400 invalid_argument", st, code)
	}
}

// violation returns the field an invalid_argument error names.
func violation(t *testing.T, err error) string {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Errorf("%v: want invalid_argument", err)
		return ""
	}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if fv, ok := v.(*gatewayv1.FieldViolation); ok && err == nil {
			return fv.Field
		}
	}
	t.Errorf("%v carries no FieldViolation", err)
	return ""
}

// A remote worker ends a flow stage with a durable timer (Forward with
// sleepMs, and again): the run sleeps in Redis before its next stage, or
// before the same stage again; a sleep out of range is refused naming
// sleepMs, the taking still held.
func TestForwardWithASleep(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	g := serveGateway(t, pool, remote.Config{Config: cfg, SessionTTL: 10 * time.Second,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond,
		Flows: []*worqr.Flow{{Name: "gs", Stages: []worqr.Stage{{Name: "wait"}, {Name: "check"}}}}})
	ctx := context.Background()
	flow := &worqr.Flow{Name: "gs", Stages: []worqr.Stage{
		{Name: "wait", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
		{Name: "check", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	c := clients(g)["json"]
	runID, err := g.client.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Queues: []string{"gs/wait", "gs/check"}}))
	if err != nil {
		t.Fatal(err)
	}
	sid := open.Msg.SessionId
	take := func(q string) string {
		t.Helper()
		res, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: q, Max: 1, WaitMs: 2000}))
		if err != nil || len(res.Msg.Takings) != 1 {
			t.Fatalf("take of %s: %v, %v", q, res, err)
		}
		return res.Msg.Takings[0].Pid
	}
	pid := take("gs/wait")
	for _, bad := range []int64{-1, 200 * 365 * 24 * 3600 * 1000} {
		_, err := c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: pid, SleepMs: bad}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "sleepMs") {
			t.Errorf("a sleep of %d ms: %v, want invalid argument naming sleepMs", bad, err)
		}
	}
	res, err := c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: pid, SleepMs: 3_600_000,
		Fields: map[string]string{"a": "1"}}))
	if err != nil || res.Msg.Outcome != "forwarded" {
		t.Fatalf("forward with a sleep: %v, %v", res, err)
	}
	info, err := g.in.Run(ctx, "gs", runID)
	if err != nil || info.Stage != "check" || info.TaskState != "scheduled" || info.State["a"] != "1" {
		t.Fatalf("run %+v, %v: want it asleep before check", info, err)
	}
	if ok, err := g.in.RunNow(ctx, "gs/check", runID); err != nil || !ok {
		t.Fatalf("RunNow = %v, %v", ok, err)
	}
	pid = take("gs/check")
	if _, err = c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: pid, SleepMs: 60_000, Again: true})); err != nil {
		t.Fatal(err)
	}
	if info, err = g.in.Run(ctx, "gs", runID); err != nil || info.Stage != "check" || info.TaskState != "scheduled" {
		t.Fatalf("run %+v, %v: want it asleep before check again", info, err)
	}
	// Awaiting a signal: one sent through the gateway moves it on, once.
	if ok, err := g.in.RunNow(ctx, "gs/check", runID); err != nil || !ok {
		t.Fatalf("RunNow = %v, %v", ok, err)
	}
	pid = take("gs/check")
	if _, err = c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: pid, Await: "paid", Again: true})); err != nil {
		t.Fatal(err)
	}
	sig := &gatewayv1.SignalRequest{Flow: "gs", RunId: runID, Name: "paid", Payload: []byte("yes"), Id: "hook-1"}
	if res, err := c.Signal(ctx, connect.NewRequest(sig)); err != nil || !res.Msg.Delivered {
		t.Fatalf("Signal = %v, %v; want delivered", res, err)
	}
	if _, err := c.Signal(ctx, connect.NewRequest(sig)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("the same signal id again: %v, want already exists", err)
	}
	if _, err := c.Signal(ctx, connect.NewRequest(&gatewayv1.SignalRequest{Flow: "gs", RunId: "nope", Name: "paid"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a signal of an unknown run: %v, want not found", err)
	}
	if _, err := c.Signal(ctx, connect.NewRequest(&gatewayv1.SignalRequest{Flow: "gs", RunId: runID})); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), "name") {
		t.Errorf("a signal without a name: %v, want invalid argument naming name", err)
	}
	took, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: "gs/check", Max: 1, WaitMs: 2000}))
	if err != nil || len(took.Msg.Takings) != 1 || took.Msg.Takings[0].State["paid"] != "yes" {
		t.Fatalf("take after the signal: %v, %v; want the run with paid=yes", took, err)
	}
}

// QueueStats carries an ordered queue's tasks behind their keys' heads, its
// keys with tasks, and how long its oldest active taking has run.
func TestQueueStatsShowBehindAndOldestActive(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	g := serveGateway(t, pool, remote.Config{Config: cfg, AnyQueue: true, SessionTTL: 10 * time.Second,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	ctx := context.Background()
	if _, err := g.client.EnqueueBatch(ctx, "ord", [][]byte{[]byte("1"), []byte("2"), []byte("3")}, &worqr.EnqueueOpts{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	c := clients(g)["json"]
	open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Queues: []string{"ord"}}))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: open.Msg.SessionId, Queue: "ord", Max: 1, WaitMs: 2000})); err != nil || len(res.Msg.Takings) != 1 {
		t.Fatalf("take: %v, %v", res, err)
	}
	var st *gatewayv1.QueueStat
	redistest.Eventually(t, 10*time.Second, func() string {
		res, err := c.QueueStats(ctx, connect.NewRequest(&gatewayv1.QueueStatsRequest{Queue: "ord"}))
		if err != nil {
			return err.Error()
		}
		st = res.Msg.Queues[0]
		if st.Active != 1 || st.Behind != 2 || st.Keys != 1 || st.OldestActiveMs == 0 {
			return fmt.Sprintf("stats %v: want 1 active, 2 behind, 1 key, an oldest active age", st)
		}
		return ""
	})
}

// A worker in another language serves a join's branches through the
// gateway: a branch's taking carries its run's state, its Forward merges
// fields into the run (a sleep is refused by name), and the join's stage
// is handed out once the branches have ended, with their fields.
func TestForwardOfABranch(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	nop, one := worqr.StageHandlerFunc(nil), worqr.QueueConfig{Concurrency: 1}
	flow := &worqr.Flow{Name: "gj", Stages: []worqr.Stage{{Name: "j", Handler: nop, Queue: one,
		Branches: map[string]worqr.Branch{"b1": {Handler: nop, Queue: one}, "b2": {Handler: nop, Queue: one}}}}}
	g := serveGateway(t, pool, remote.Config{Config: cfg, SessionTTL: 10 * time.Second,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond, Flows: []*worqr.Flow{flow}})
	ctx := context.Background()
	c := clients(g)["json"]
	runID, err := g.client.StartRun(ctx, flow, map[string]string{"x": "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Queues: []string{"gj/j", "gj/b1", "gj/b2"}}))
	if err != nil {
		t.Fatal(err)
	}
	sid := open.Msg.SessionId
	take := func(q string, wait uint32) []*gatewayv1.Taking {
		t.Helper()
		res, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: q, Max: 1, WaitMs: wait}))
		if err != nil {
			t.Fatalf("take of %s: %v", q, err)
		}
		return res.Msg.Takings
	}
	if ks := take("gj/j", 0); len(ks) != 0 {
		t.Fatalf("the join's stage handed out %v before its branches ran", ks)
	}
	for _, q := range []string{"b1", "b2"} {
		ks := take("gj/"+q, 2000)
		if len(ks) != 1 || ks[0].State["x"] != "1" || ks[0].Parent != runID {
			t.Fatalf("branch %s taken as %v: want one taking with the run's state", q, ks)
		}
		_, err := c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: ks[0].Pid, SleepMs: 1000}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "sleep") {
			t.Errorf("a branch's sleep: %v, want invalid argument naming sleep", err)
		}
		res, err := c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: ks[0].Pid,
			Fields: map[string]string{q: "by " + q}}))
		if err != nil || res.Msg.Outcome != "done" {
			t.Fatalf("branch %s Forward: %v, %v; want done", q, res, err)
		}
	}
	ks := take("gj/j", 2000)
	if len(ks) != 1 || ks[0].State["b1"] != "by b1" || ks[0].State["b2"] != "by b2" {
		t.Fatalf("the join taken as %v: want one taking with both branches' fields", ks)
	}
	if _, err := c.Forward(ctx, connect.NewRequest(&gatewayv1.ForwardRequest{SessionId: sid, Pid: ks[0].Pid})); err != nil {
		t.Fatal(err)
	}
	if info, err := g.in.Run(ctx, "gj", runID); err != nil || info.Status != worqr.RunDone {
		t.Fatalf("run %+v, %v: want done", info, err)
	}
}

package gateway_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/gomodule/redigo/redis"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/worqr/worqr-go/gateway"
	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
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

// The token was checked by an interceptor, which Connect runs after it has
// read and decoded the request: a caller without the token had its body
// (up to --max-message-bytes) read and parsed, was told how it failed to
// parse (invalid_argument, not the unauthenticated the docs promise), and
// could hold a handler for as long as it took to send a body it never
// finished. A call without the token is refused before its body is read.
func TestUnauthenticatedCallIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	g := startGateway(t, 2*time.Second)
	post := func(body io.Reader) (*http.Response, error) {
		req, _ := http.NewRequest("POST", g.url+"/worqr.gateway.v1.GatewayService/Enqueue", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer wrong")
		return http.DefaultClient.Do(req)
	}
	res, err := post(strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var e struct{ Code string }
	_ = json.Unmarshal(data, &e)
	if res.StatusCode != http.StatusUnauthorized || e.Code != "unauthenticated" {
		t.Errorf("a call with a wrong token and a bad body = %d %s, want 401 unauthenticated", res.StatusCode, data)
	}

	// A body that never ends: the answer must not wait for it.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"queue":"q","payload":"`)) }()
	type answer struct {
		status int
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := post(pr)
		if err != nil {
			got <- answer{0, err}
			return
		}
		res.Body.Close()
		got <- answer{res.StatusCode, nil}
	}()
	select {
	case a := <-got:
		if a.err != nil || a.status != http.StatusUnauthorized {
			t.Errorf("a call with a wrong token and an endless body = %d, %v; want 401", a.status, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a call with a wrong token is still unanswered after 5 s: the gateway waits for its body")
	}

	// Every protocol still gets unauthenticated as its own error.
	for proto, c := range map[string]gatewayv1connect.GatewayServiceClient{
		"grpc":     gatewayv1connect.NewGatewayServiceClient(h2cClient(), g.url, connect.WithGRPC()),
		"grpc-web": gatewayv1connect.NewGatewayServiceClient(http.DefaultClient, g.url, connect.WithGRPCWeb()),
		"json":     gatewayv1connect.NewGatewayServiceClient(http.DefaultClient, g.url, connect.WithProtoJSON()),
	} {
		_, err := c.Enqueue(context.Background(), connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: "q"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: a call without the token = %v, want unauthenticated", proto, err)
		}
	}
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

// A Redis host that cannot be dialled within the connect timeout (a
// firewall that drops packets, a host down) is not named to remote callers
// either, and the answer is unavailable: the dial error "dial tcp
// <host>:<port>: i/o timeout" is a context.DeadlineExceeded (net's timeout
// error says so), and the gateway passed it on as deadline_exceeded with
// its text (found by an audit).
func TestBlackholedRedisIsNotNamed(t *testing.T) {
	addr := blackhole(t)
	pool, err := redisconn.NewPool("redis://"+addr+"/0", &redisconn.Options{ConnectTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	g := startGatewayWith(t, pool, worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true})
	for _, c := range []struct {
		method string
		body   map[string]any
	}{
		{"Enqueue", map[string]any{"queue": "q", "payload": "eA=="}},
		{"QueueStats", map[string]any{"queue": "q"}},
		{"GetTask", map[string]any{"queue": "q", "id": "x"}},
		{"OpenSession", map[string]any{"queues": []string{"q"}}},
	} {
		for i := 0; i < 3; i++ { // net reports some dial timeouts as timeouts only
			status, data := g.raw(t, c.method, c.body)
			if strings.Contains(string(data), addr) || status != http.StatusServiceUnavailable {
				t.Errorf("%s with Redis unreachable (dial timeout): %d %s; want 503 unavailable, not naming %s", c.method, status, data, addr)
				break
			}
		}
	}
}

// A session id was its worker id, which the gateway itself publishes:
// GetTask answers the worker id and pid of a running task (so do the
// Inspector, the dashboard and the event stream). Any caller could then
// end another session's taking (its result recorded, the remote's refused)
// or beat a session whose remote had died, keeping its takings from the
// recovery for as long as it beat. A session id is a secret only its
// opener learns; the worker id does not name the session.
func TestSessionIsNamedOnlyByWhatItsOpenerLearnt(t *testing.T) {
	g := startGateway(t, 2*time.Second)
	ctx := context.Background()
	c := clients(g)["grpc"]
	enq, err := c.Enqueue(ctx, connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: "iso", Payload: []byte("p")}))
	if err != nil {
		t.Fatal(err)
	}
	open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Queues: []string{"iso"}}))
	if err != nil {
		t.Fatal(err)
	}
	take, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: open.Msg.SessionId, Queue: "iso"}))
	if err != nil || len(take.Msg.Takings) != 1 {
		t.Fatalf("take = %v, %v", take, err)
	}
	// Another caller reads the task: who runs it, under which pid.
	info, err := c.GetTask(ctx, connect.NewRequest(&gatewayv1.GetTaskRequest{Queue: "iso", Id: enq.Msg.Id}))
	if err != nil {
		t.Fatal(err)
	}
	worker, pid := info.Msg.Task.WorkerId, info.Msg.Task.Pid
	if worker == "" || pid == "" {
		t.Fatalf("task %+v: no worker id or pid", info.Msg.Task)
	}
	if _, err := c.Beat(ctx, connect.NewRequest(&gatewayv1.BeatRequest{SessionId: worker})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("beat naming the session by its published worker id = %v, want failed_precondition", err)
	}
	if _, err := c.Finish(ctx, connect.NewRequest(&gatewayv1.FinishRequest{SessionId: worker, Pid: pid, Result: []byte("forged")})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("finish naming the session by its published worker id = %v, want failed_precondition", err)
	}
	fin, err := c.Finish(ctx, connect.NewRequest(&gatewayv1.FinishRequest{SessionId: open.Msg.SessionId, Pid: take.Msg.Takings[0].Pid, Result: []byte("mine")}))
	if err != nil || fin.Msg.Outcome != "done" {
		t.Fatalf("the session's own finish = %v, %v; want done", fin, err)
	}
	got, err := c.GetTask(ctx, connect.NewRequest(&gatewayv1.GetTaskRequest{Queue: "iso", Id: enq.Msg.Id}))
	if err != nil || string(got.Msg.Task.Result) != "mine" {
		t.Fatalf("task = %v, %v; want the result of the session that took it", got, err)
	}
}

// With WORQR_REPLICAS (Config.Replicas) and a replica short, an enqueue is
// applied on the primary and returns its id with ErrNotReplicated: the
// gateway answers the id, with the header Worqr-Not-Replicated. It
// answered unavailable ("try again") and dropped the id, so a caller that
// did as told enqueued the task twice (found by an audit).
func TestEnqueueShortOfReplicas(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	g := startGatewayWith(t, pool, worqr.Config{Namespace: ns, DisableEvents: true, Replicas: 1, ReplicaTimeout: 50 * time.Millisecond})
	status, data := g.raw(t, "Enqueue", map[string]any{"queue": "rq", "payload": "eA=="})
	t.Logf("Enqueue: %d %s", status, data)
	var qs struct {
		Queues []struct {
			Waiting int `json:"waiting"`
		} `json:"queues"`
	}
	st, body := g.raw(t, "QueueStats", map[string]any{"queue": "rq"})
	if st != 200 || json.Unmarshal(body, &qs) != nil || len(qs.Queues) != 1 {
		t.Fatalf("QueueStats: %d %s", st, body)
	}
	if status != http.StatusOK && qs.Queues[0].Waiting != 0 {
		t.Fatalf("Enqueue answered %d %s, yet the task is enqueued (%d waiting): a caller that repeats it enqueues it twice, and it was not given the id", status, data, qs.Queues[0].Waiting)
	}
}

// A batch larger than one atomic step that stops part way (here Redis's
// maxmemory, reached after the first steps) answers aborted, saying how many
// payloads, from the first, are enqueued: an unavailable had the caller
// send them all again.
func TestEnqueueBatchStoppedPartWay(t *testing.T) {
	s, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	g := startGatewayOn(t, s, 2*time.Second)
	c, err := redis.DialURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := strings.Repeat("x", 1024)
	payloads := make([]string, 2000)
	for i := range payloads {
		payloads[i] = base64.StdEncoding.EncodeToString([]byte(payload))
	}
	// Room for a few steps of 250 tasks of 1 KiB, not for 2,000.
	info, err := redis.String(c.Do("INFO", "memory"))
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if _, err := c.Do("CONFIG", "SET", "maxmemory", used+2<<20); err != nil {
		t.Fatal(err)
	}
	status, data := g.raw(t, "EnqueueBatch", map[string]any{"queue": "big", "payloads": payloads})
	var out struct{ Code, Message string }
	_ = json.Unmarshal(data, &out)
	qi, err := g.in.Queue(context.Background(), "big")
	if err != nil {
		t.Fatal(err)
	}
	n := int(qi.Waiting)
	if status == http.StatusOK || out.Code != "aborted" || !strings.Contains(out.Message, " of the 2000 payloads are enqueued") || strings.Contains(out.Message, "OOM") {
		t.Fatalf("a batch stopped part way: %d %s; want aborted, saying how many are in (the queue holds %d)", status, data, n)
	}
	var said int
	if _, err := fmt.Sscanf(out.Message, "worqr gateway: %d of the 2000", &said); err != nil || said == 0 || said > n {
		t.Fatalf("the answer %q names no count, or more than the queue holds (%d)", out.Message, n)
	}
	t.Logf("%s (the queue holds %d)", out.Message, n)
}

// Counts come as JSON numbers: QueueStat's were int64, which the JSON
// mapping writes as strings ("waiting":"2").
func TestJSONCountsAreNumbers(t *testing.T) {
	g := startGateway(t, 10*time.Second)
	for range 2 {
		if st, code := g.call(t, "Enqueue", map[string]any{"queue": "counted", "payload": "eA=="}, nil); st != http.StatusOK {
			t.Fatalf("enqueue: %d %s", st, code)
		}
	}
	var open struct{ SessionId string }
	g.call(t, "OpenSession", map[string]any{"queues": []string{"counted"}}, &open)
	for _, c := range []struct {
		method string
		in     map[string]any
		reply  proto.Message
	}{
		{"QueueStats", map[string]any{"queue": "counted"}, &gatewayv1.QueueStatsResponse{}},
		{"Take", map[string]any{"sessionId": open.SessionId, "queue": "counted"}, &gatewayv1.TakeResponse{}},
	} {
		status, data := g.raw(t, c.method, c.in)
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %s", c.method, status, data)
		}
		for _, f := range notNumbers(c.reply.ProtoReflect().Descriptor(), out, "") {
			t.Errorf("%s's reply carries %s as a string, want a number: %s", c.method, f, data)
		}
		if qs, _ := out["queues"].([]any); c.method == "QueueStats" && (len(qs) != 1 || qs[0].(map[string]any)["waiting"] != 2.0) {
			t.Errorf("QueueStats = %s, want waiting 2", data)
		}
	}
}

// notNumbers names the integer fields of md that obj (its JSON) carries as
// anything but a number, nested ones included.
func notNumbers(md protoreflect.MessageDescriptor, obj map[string]any, at string) []string {
	var out []string
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		name := at + f.JSONName()
		v := obj[f.JSONName()]
		switch {
		case f.IsMap():
		case f.Message() != nil && f.IsList():
			l, _ := v.([]any)
			for j, e := range l {
				if o, ok := e.(map[string]any); ok {
					out = append(out, notNumbers(f.Message(), o, fmt.Sprintf("%s[%d].", name, j))...)
				}
			}
		case f.Message() != nil:
			if o, ok := v.(map[string]any); ok {
				out = append(out, notNumbers(f.Message(), o, name+".")...)
			}
		case f.Kind() == protoreflect.BoolKind, f.Kind() == protoreflect.StringKind, f.Kind() == protoreflect.BytesKind,
			f.Kind() == protoreflect.EnumKind:
		default:
			if _, ok := v.(float64); !ok && v != nil {
				out = append(out, name)
			}
		}
	}
	return out
}

// A Take's reply had no bound: max takings of up to MaxPayloadBytes each
// (1,000 x 1 MiB), built whole in the gateway's memory. A gRPC client
// refuses a reply over its receive limit (4 MiB in grpc-go, grpc-java,
// Python's grpcio): the take failed for the remote, and its takings stayed
// held by the session, never seen, never run, until the session ended (or
// a beat with check_running). The reply carries at most
// --max-message-bytes (the first taking always); the takings past it are
// put back at the front of the queue, in order, at once.
func TestTakeReplyFitsTheMessageLimit(t *testing.T) {
	g := startGateway(t, 10*time.Second)
	ctx := context.Background()
	c := gatewayv1connect.NewGatewayServiceClient(h2cAuthed(), g.url, connect.WithGRPC(),
		connect.WithReadMaxBytes(4<<20)) // grpc-go's default receive limit
	const n = 6
	var ids []string
	for i := 0; i < n; i++ {
		payload := bytes.Repeat([]byte{byte('a' + i)}, 1_000_000)
		res, err := c.Enqueue(ctx, connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: "big", Payload: payload}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Msg.Id)
	}
	open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Queues: []string{"big"}}))
	if err != nil {
		t.Fatal(err)
	}
	sid := open.Msg.SessionId
	var got []string
	for take := 1; len(got) < n && take <= n; take++ {
		res, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: "big", Max: n}))
		if err != nil {
			t.Fatalf("take #%d = %v (after %d of %d tasks): the reply is over the client's 4 MiB limit", take, err, len(got), n)
		}
		if len(res.Msg.Takings) == 0 {
			t.Fatalf("take #%d got nothing after %d of %d tasks: the rest are held by the session", take, len(got), n)
		}
		for _, k := range res.Msg.Takings {
			got = append(got, k.TaskId)
			if _, err := c.Finish(ctx, connect.NewRequest(&gatewayv1.FinishRequest{SessionId: sid, Pid: k.Pid})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("took %v, want every task once, in order: %v", got, ids)
	}
}

// h2cAuthed is an HTTP/2 cleartext client that sends the token.
func h2cAuthed() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: authed{&http.Transport{Protocols: p}}}
}

// The cap counts a Take's reply as it is sent: in JSON, base64 makes a
// payload a third larger, and the cap counted the payload's bytes, so a
// JSON reply could pass --max-message-bytes by a third (three payloads of
// 300,000 bytes, 900 KB counted, went out as 1.2 MB under a 1 MiB cap).
// Each protocol's reply stays within the cap, and every task is taken
// once, in order.
func TestTakeReplyCapCountsTheBytesSent(t *testing.T) {
	const limit = 1 << 20
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	g := serveGateway(t, pool, remote.Config{Config: cfg, AnyQueue: true, SessionTTL: 10 * time.Second,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond},
		func(c *gateway.Config) { c.MaxMessageBytes = limit })
	ctx := context.Background()
	for protocol, c := range clients(g) {
		t.Run(protocol, func(t *testing.T) {
			q := "capped-" + protocol
			const n = 7
			var ids []string
			for i := 0; i < n; i++ {
				id, err := g.client.Enqueue(ctx, q, bytes.Repeat([]byte{byte('a' + i)}, 300_000), nil)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			open, err := c.OpenSession(ctx, connect.NewRequest(&gatewayv1.OpenSessionRequest{Queues: []string{q}}))
			if err != nil {
				t.Fatal(err)
			}
			sid := open.Msg.SessionId
			var got []string
			for take := 1; len(got) < n && take <= n; take++ {
				var takings []*gatewayv1.Taking
				if protocol == "json" {
					// Read the reply's bytes as they came.
					status, data := g.raw(t, "Take", map[string]any{"sessionId": sid, "queue": q, "max": n})
					if status != http.StatusOK {
						t.Fatalf("take #%d: %d %.200s", take, status, data)
					}
					var res struct {
						Takings []struct{ Pid, TaskId string }
					}
					if err := json.Unmarshal(data, &res); err != nil {
						t.Fatal(err)
					}
					if len(data) > limit && len(res.Takings) > 1 {
						t.Errorf("take #%d: a JSON reply of %d bytes with %d takings, over the %d-byte cap", take, len(data), len(res.Takings), limit)
					}
					for _, k := range res.Takings {
						takings = append(takings, &gatewayv1.Taking{Pid: k.Pid, TaskId: k.TaskId})
					}
				} else {
					res, err := c.Take(ctx, connect.NewRequest(&gatewayv1.TakeRequest{SessionId: sid, Queue: q, Max: n}))
					if err != nil {
						t.Fatalf("take #%d: %v", take, err)
					}
					if size := proto.Size(res.Msg); size > limit && len(res.Msg.Takings) > 1 {
						t.Errorf("take #%d: a reply of %d bytes with %d takings, over the %d-byte cap", take, size, len(res.Msg.Takings), limit)
					}
					takings = res.Msg.Takings
				}
				if len(takings) == 0 {
					t.Fatalf("take #%d got nothing after %d of %d tasks", take, len(got), n)
				}
				for _, k := range takings {
					got = append(got, k.TaskId)
					if _, err := c.Finish(ctx, connect.NewRequest(&gatewayv1.FinishRequest{SessionId: sid, Pid: k.Pid})); err != nil {
						t.Fatal(err)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(ids) {
				t.Errorf("took %v, want every task once, in order: %v", got, ids)
			}
		})
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "worqr-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestGRPCOverTLS serves the gateway with a certificate (as --tls-cert and
// --tls-key do) and calls it over gRPC on HTTP/2 with TLS.
func TestGRPCOverTLS(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	rs, err := remote.NewServer(pool, &remote.Config{Config: cfg, AnyQueue: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = rs.Stop(ctx)
	}()
	client, _ := worqr.NewClient(pool, &cfg)
	insp, _ := worqr.NewInspector(pool, &cfg)
	hs, err := gateway.NewServer("127.0.0.1:0", gateway.Config{Remote: rs, Client: client, Inspector: insp})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, roots := selfSigned(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.ServeTLS(l, certFile, keyFile) }()
	defer hs.Close()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	c := gatewayv1connect.NewGatewayServiceClient(&http.Client{Transport: tr}, "https://"+l.Addr().String(), connect.WithGRPC())
	res, err := c.Enqueue(context.Background(), connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: "q", Payload: []byte("x")}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Id == "" {
		t.Fatal("no id")
	}
}

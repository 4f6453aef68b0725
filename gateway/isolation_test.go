package gateway_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
)

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

package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
)

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

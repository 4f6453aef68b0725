package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/worqr/worqr-go/gateway"
	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
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

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/worqr/worqr-go/gateway"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// The gateway serves worqr to programs in any language. Here a producer and
// a remote worker speak JSON over HTTP to it (gRPC and gRPC-Web work on the
// same port): the worker opens a session, takes a task and finishes it by
// its pid, the fencing token.
func ExampleNewServer() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-gateway"}
	rs, err := remote.NewServer(pool, &remote.Config{Config: cfg, AnyQueue: true,
		DefaultQueue: worqr.QueueConfig{Retention: time.Hour}})
	if err != nil {
		panic(err)
	}
	if err := rs.Start(ctx); err != nil {
		panic(err)
	}
	defer rs.Stop(ctx)
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	server, err := gateway.NewServer("127.0.0.1:0", gateway.Config{Remote: rs, Client: client, Inspector: in, Token: "s3cret"})
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", server.Addr)
	if err != nil {
		panic(err)
	}
	go server.Serve(l)
	defer server.Close()

	// call posts one JSON request, as a program in any language would.
	call := func(method string, request, reply any) {
		body, _ := json.Marshal(request)
		req, _ := http.NewRequest("POST", "http://"+l.Addr().String()+"/worqr.gateway.v1.GatewayService/"+method, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer s3cret")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			panic(fmt.Sprintf("%s: %s", method, res.Status))
		}
		if err := json.NewDecoder(res.Body).Decode(reply); err != nil {
			panic(err)
		}
	}

	var task struct{ ID string }
	call("Enqueue", map[string]any{"queue": "pdf", "payload": []byte("report.md")}, &task)

	var session struct {
		SessionID string
		BeatMs    int // beat at least this often while working
	}
	call("OpenSession", map[string]any{"name": "converter-1", "queues": []string{"pdf"}}, &session)
	var took struct {
		Takings []struct {
			Pid     string
			Payload []byte // bytes travel in base64
		}
	}
	call("Take", map[string]any{"sessionId": session.SessionID, "queue": "pdf", "max": 10, "waitMs": 5000}, &took)
	for _, t := range took.Takings {
		fmt.Println("took", string(t.Payload))
		var end struct{ Outcome string }
		call("Finish", map[string]any{"sessionId": session.SessionID, "pid": t.Pid, "result": []byte("report.pdf")}, &end)
		fmt.Println(end.Outcome)
	}
	call("CloseSession", map[string]any{"sessionId": session.SessionID}, &struct{}{})

	var info struct {
		Task struct {
			State  string
			Result []byte
		}
	}
	call("GetTask", map[string]any{"queue": "pdf", "id": task.ID}, &info)
	fmt.Println(info.Task.State, string(info.Task.Result))
	// Output:
	// took report.md
	// done
	// done report.pdf
}

package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
)

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

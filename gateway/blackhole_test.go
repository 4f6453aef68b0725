package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

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

package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

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

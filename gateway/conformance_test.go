package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/worqr/worqr-go/gateway"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.Main(m, &srv)
}

const token = "s3cret"

// gw is a gateway on a free loopback port, with short keepalive settings.
type gw struct {
	url    string
	client *worqr.Client
	in     *worqr.Inspector
}

func startGateway(t *testing.T, ttl time.Duration) *gw {
	t.Helper()
	return startGatewayOn(t, srv, ttl)
}

// startGatewayOn starts a gateway on Redis server s.
func startGatewayOn(t *testing.T, s *redistest.Server, ttl time.Duration) *gw {
	t.Helper()
	pool := s.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	return serveGateway(t, pool, remote.Config{Config: cfg, AnyQueue: true,
		DefaultQueue: worqr.QueueConfig{Retention: time.Hour}, SessionTTL: ttl,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
}

// serveGateway starts the Remote of rc on pool, with a Client and an
// Inspector of rc's Config, and a gateway on them on a free loopback port
// (its Config changed by each of tune); all stop when the test ends.
func serveGateway(t *testing.T, pool worqr.ConnGetter, rc remote.Config, tune ...func(*gateway.Config)) *gw {
	t.Helper()
	cfg := rc.Config
	rs, err := remote.NewServer(pool, &rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	insp, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	gc := gateway.Config{Remote: rs, Client: client, Inspector: insp, Token: token}
	for _, f := range tune {
		f(&gc)
	}
	hs, err := gateway.NewServer("127.0.0.1:0", gc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = rs.Stop(ctx)
		_ = hs.Close()
	})
	return &gw{url: "http://" + l.Addr().String(), client: client, in: insp}
}

// call posts a Connect JSON request and decodes the reply into out. It
// returns the HTTP status and, on an error, the Connect error's code.
func (g *gw) call(t *testing.T, method string, in, out any) (int, string) {
	t.Helper()
	status, data := g.raw(t, method, in)
	if status != http.StatusOK {
		var e struct{ Code string }
		_ = json.Unmarshal(data, &e)
		return status, e.Code
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: %v in %s", method, err, data)
		}
	}
	return status, ""
}

// raw posts a Connect JSON request and returns the HTTP status and body.
func (g *gw) raw(t *testing.T, method string, in any) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(in)
	req, _ := http.NewRequest("POST", g.url+"/worqr.gateway.v1.GatewayService/"+method, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, data
}

// nodeWorker is one `node testdata/worker.mjs` process and the lines it
// printed.
type nodeWorker struct {
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced on each line
}

func startWorker(t *testing.T, g *gw, name, queue string) *nodeWorker {
	t.Helper()
	cmd := exec.Command("node", "testdata/worker.mjs")
	cmd.Env = append(os.Environ(), "GATEWAY="+g.url, "QUEUE="+queue, "NAME="+name, "TOKEN="+token, "WORK_MS=500")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &nodeWorker{name: name, cmd: cmd, added: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			close(w.added)
			w.added = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return w
}

// waitLine waits for a line after the first `from` lines that starts with
// prefix, and returns its fields and index.
func (w *nodeWorker) waitLine(t *testing.T, from int, prefix string, within time.Duration) ([]string, int) {
	t.Helper()
	deadline := time.After(within)
	for {
		w.mu.Lock()
		for i := from; i < len(w.lines); i++ {
			if strings.HasPrefix(w.lines[i], prefix) {
				w.mu.Unlock()
				return strings.Fields(w.lines[i]), i
			}
		}
		added := w.added
		w.mu.Unlock()
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("%s printed no %q line within %s; lines: %q", w.name, prefix, within, w.snapshot())
		}
	}
}

func (w *nodeWorker) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

func (w *nodeWorker) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lines)
}

// waitTaken waits until one of ws prints that it took task id, and says
// which one.
func waitTaken(t *testing.T, ws []*nodeWorker, id string, within time.Duration) *nodeWorker {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, w := range ws {
			for _, l := range w.snapshot() {
				if strings.HasPrefix(l, "took "+id+" ") {
					return w
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("task %s was not taken again within %s", id, within)
	return nil
}

// TestNodeWorkersConformance runs three Node workers against the gateway (2 s
// session TTL: short, yet long enough for a loaded CI machine):
// one is killed mid-task (its task is taken again by another), one is frozen
// past its session's expiry and then resumed (its late finish is refused
// with failed_precondition), and every task ends done with exactly one
// accepted finish.
func TestNodeWorkersConformance(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found: the gateway's conformance test needs Node >= 18 (apt-get install nodejs)")
	}
	const ttl = 2 * time.Second
	g := startGateway(t, ttl)
	const n = 40
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "dGFzaw==" // "task"
	}
	var enq struct{ Ids []string }
	if st, code := g.call(t, "EnqueueBatch", map[string]any{"queue": "jobs", "payloads": payloads}, &enq); st != 200 || len(enq.Ids) != n {
		t.Fatalf("EnqueueBatch: %d %s, %d ids", st, code, len(enq.Ids))
	}
	w1 := startWorker(t, g, "w1", "jobs")
	w2 := startWorker(t, g, "w2", "jobs")
	w3 := startWorker(t, g, "w3", "jobs")

	// SIGKILL w1 mid-task: another worker takes that task again once w1's
	// session expires and the reaper requeues it.
	f, _ := w1.waitLine(t, 0, "took ", 30*time.Second)
	if err := w1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	by := waitTaken(t, []*nodeWorker{w2, w3}, f[1], 30*time.Second)
	t.Logf("task %s of the killed w1 taken again by %s after %s", f[1], by.name, time.Since(killed).Round(10*time.Millisecond))

	// SIGSTOP w2 mid-task past its session's expiry, until another worker
	// took its task again; then SIGCONT: its finish must be refused.
	f, at := w2.waitLine(t, w2.count(), "took ", 30*time.Second)
	if err := w2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedID, stoppedPID := f[1], f[2]
	by = waitTaken(t, []*nodeWorker{w3}, stoppedID, 30*time.Second)
	if err := w2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r, _ := w2.waitLine(t, at, "refused "+stoppedID+" "+stoppedPID, 30*time.Second)
	if r[3] != "failed_precondition" {
		t.Errorf("the resumed worker's finish was refused with %v, want failed_precondition", r)
	}
	t.Logf("frozen w2's late finish of %s refused: %v (task retaken by %s)", stoppedID, r, by.name)

	// Every task ends done, each with exactly one accepted finish.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st struct {
			Queues []struct{ Waiting, Active, Scheduled int }
		}
		g.call(t, "QueueStats", map[string]any{"queue": "jobs"}, &st)
		q := st.Queues[0]
		if q.Waiting == 0 && q.Active == 0 && q.Scheduled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not drained: %+v", q)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The queue is drained: no taking is left, so no finish can be accepted
	// from now on. Wait until the workers printed what Redis already
	// recorded, then count.
	var finishes map[string]int
	count := func() bool {
		finishes = map[string]int{}
		for _, w := range []*nodeWorker{w1, w2, w3} {
			for _, l := range w.snapshot() {
				if f := strings.Fields(l); len(f) == 4 && f[0] == "finished" {
					finishes[f[1]]++
				}
			}
		}
		for _, id := range enq.Ids {
			if finishes[id] == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !count() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range enq.Ids {
		var got struct {
			Task struct{ State, Result string }
		}
		if st, code := g.call(t, "GetTask", map[string]any{"queue": "jobs", "id": id}, &got); st != 200 {
			t.Fatalf("GetTask %s: %d %s", id, st, code)
		}
		if got.Task.State != "done" || finishes[id] != 1 {
			var seen []string
			for _, w := range []*nodeWorker{w1, w2, w3} {
				for _, l := range w.snapshot() {
					if strings.Contains(l, id) {
						seen = append(seen, w.name+": "+l)
					}
				}
			}
			t.Errorf("task %s: state %s, %d accepted finishes; want done, exactly 1; lines: %q", id, got.Task.State, finishes[id], seen)
		}
	}
	if finishes[stoppedID] == 1 {
		for _, l := range w2.snapshot() {
			if strings.HasPrefix(l, fmt.Sprintf("finished %s %s", stoppedID, stoppedPID)) {
				t.Errorf("the frozen worker's late finish was accepted: %s", l)
			}
		}
	}
}

// The Node worker of docs/GATEWAY.md outlives its gateway's Redis going
// away for longer than a session: its beats are refused (the session is
// lost), its reopen fails while Redis is away, and once Redis is back it
// opens a session and runs work again (it crashed on the first failed
// reopen before).
func TestNodeWorkerOutlastsRedisAway(t *testing.T) {
	s, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	g := startGatewayOn(t, s, 2*time.Second)
	w := startWorker(t, g, "n1", "away")
	w.waitLine(t, 0, "session ", 10*time.Second)
	s.Kill()
	_, i := w.waitLine(t, 0, "open failed ", 30*time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	_, j := w.waitLine(t, i, "session ", 30*time.Second)
	id, err := g.client.Enqueue(context.Background(), "away", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, j, "finished "+id+" ", 30*time.Second)
}

// A call that fails because Redis cannot be reached answers unavailable
// without the text of the dial error: it names the Redis address, which
// is not the remote caller's to know.
func TestUnreachableRedisIsNotNamed(t *testing.T) {
	s, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	g := startGatewayOn(t, s, 2*time.Second)
	s.Kill()
	status, data := g.raw(t, "Enqueue", map[string]any{"queue": "q", "payload": "eA=="})
	addr := strings.TrimPrefix(s.URL, "redis://")
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		addr = addr[:i]
	}
	if status != http.StatusServiceUnavailable || strings.Contains(string(data), addr) || !strings.Contains(string(data), "unavailable") {
		t.Fatalf("enqueue with Redis down: %d %s; want 503 unavailable, not naming %s", status, data, addr)
	}
}

// A Redis error that names a host (MOVED, from a gateway pointed at one
// node of a Redis Cluster without its cluster mode) answers unavailable
// without that text: the remote caller is not to learn the topology.
func TestRedisRepliesNamingHostsAreNotPassedOn(t *testing.T) {
	cl, err := redistest.StartCluster(3)
	if errors.Is(err, redistest.ErrNoRedisCLI) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	g := startGatewayOn(t, cl.Nodes[0], 2*time.Second)
	moved := 0
	for i := 0; i < 20; i++ {
		status, data := g.raw(t, "Enqueue", map[string]any{"queue": fmt.Sprintf("q%d", i), "payload": "eA=="})
		if status == http.StatusOK {
			continue
		}
		moved++
		for _, n := range cl.Nodes {
			if strings.Contains(string(data), n.Addr) || strings.Contains(string(data), "MOVED") {
				t.Fatalf("enqueue answered %d %s: it names the cluster's nodes", status, data)
			}
		}
		if status != http.StatusServiceUnavailable {
			t.Fatalf("enqueue answered %d %s, want 503 unavailable", status, data)
		}
	}
	if moved == 0 {
		t.Fatal("no enqueue reached a queue of another node: the test proves nothing")
	}
}

// A non-Go worker gets a task of an ordered queue as a Go handler does:
// its payload, its key and every payload merged into it (the gateway
// handed out the internal envelope before).
func TestNodeWorkerGetsAKeyedTask(t *testing.T) {
	g := startGateway(t, 10*time.Second)
	ctx := context.Background()
	if err := g.client.SetKeyPolicy(ctx, "keyed", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	id, err := g.client.Enqueue(ctx, "keyed", []byte("first"), &worqr.EnqueueOpts{Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.client.Enqueue(ctx, "keyed", []byte("second"), &worqr.EnqueueOpts{Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, g, "n1", "keyed")
	f, _ := w.waitLine(t, 0, "took "+id+" ", 30*time.Second)
	var got struct {
		Payload string   `json:"payload"`
		Key     string   `json:"key"`
		Merged  []string `json:"merged"`
	}
	if err := json.Unmarshal([]byte(strings.Join(f[3:], " ")), &got); err != nil {
		t.Fatalf("the worker's line %q: %v", f, err)
	}
	if got.Payload != "second" || got.Key != "k1" || len(got.Merged) != 2 || got.Merged[0] != "first" || got.Merged[1] != "second" {
		t.Fatalf("the Node worker got %+v, want payload second, key k1, merged [first second]", got)
	}
}

// A Go producer's envelopes do not reach a Node worker: the task type of
// EnqueueOpts.Type and the trace context of contrib/otel's Enqueue of a
// keyed task come as fields, and the payload as it was given (they came
// inside the payload's bytes, the type's tag in front of the envelope).
func TestNodeWorkerGetsATypedTracedTask(t *testing.T) {
	g := startGateway(t, 10*time.Second)
	ctx := context.Background()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	// contrib/otel's envelope (this module does not import it).
	traced := []byte("\x00wqh:" + traceparent + "\x00inv-7")
	id, err := g.client.Enqueue(ctx, "typed", traced, &worqr.EnqueueOpts{Type: "bill", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, g, "n1", "typed")
	f, _ := w.waitLine(t, 0, "took "+id+" ", 30*time.Second)
	var got struct {
		Payload     string `json:"payload"`
		Type        string `json:"type"`
		Traceparent string `json:"traceparent"`
	}
	if err := json.Unmarshal([]byte(strings.Join(f[3:], " ")), &got); err != nil {
		t.Fatalf("the worker's line %q: %v", f, err)
	}
	if got.Payload != "inv-7" || got.Type != "bill" || got.Traceparent != traceparent {
		t.Fatalf("the Node worker got %+v, want payload inv-7, type bill, traceparent %s", got, traceparent)
	}
}

// The Node worker docs/GATEWAY.md shows is the one these tests run (the
// docs' copy had drifted from it).
func TestDocsShowTheWorkerTheTestsRun(t *testing.T) {
	js, err := os.ReadFile("testdata/worker.mjs")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/GATEWAY.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(js), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "//") {
		lines = lines[1:]
	}
	want := strings.Join(lines, "")
	_, rest, ok := strings.Cut(string(doc), "## A worker in Node")
	if ok {
		_, rest, ok = strings.Cut(rest, "```js\n")
	}
	got, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal(`docs/GATEWAY.md has no "## A worker in Node" section with a js block`)
	}
	if got != want {
		t.Errorf("docs/GATEWAY.md's Node worker differs from testdata/worker.mjs (after its first comment)")
	}
}

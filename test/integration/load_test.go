package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/load"
	"github.com/worqr/worqr-go/worqr"
)

// loadInput is n lines "line-<i>", with a blank line after every 97th.
func loadInput(n int) ([]byte, []string) {
	var b bytes.Buffer
	var want []string
	for i := 1; i <= n; i++ {
		s := fmt.Sprintf("line-%d", i)
		want = append(want, s)
		b.WriteString(s + "\n")
		if i%97 == 0 {
			b.WriteString("  \n")
		}
	}
	return b.Bytes(), want
}

// payloads returns the payload of every waiting task of queue, sorted. A
// loaded task waits packed: its payload is a field of its shared hash, and
// it has no hash of its own (the HGET of a missing hash fails the spec).
func (e *env) payloads(queue string) []string {
	GinkgoHelper()
	ids := e.waiting(queue)
	c := e.pool.Get()
	defer c.Close()
	for _, id := range ids {
		key, field := e.qk(queue).Packed(id)
		Expect(c.Send("HGET", key, field)).To(Succeed())
	}
	Expect(c.Flush()).To(Succeed())
	out := make([]string, 0, len(ids))
	for range ids {
		p, err := redis.String(c.Receive())
		Expect(err).NotTo(HaveOccurred())
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// cutConn breaks its connection after reading the reply of the armed-th
// load chunk that it receives: Redis applied that chunk and every chunk
// sent after it, and the loader sees none of their replies.
type cutConn struct {
	redis.Conn
	armed *atomic.Int32
	sent  int
}

func isLoad(cmd string, args []any) bool {
	return (cmd == "FCALL" || cmd == "EVALSHA" || cmd == "EVAL") && len(args) > 3 && strings.Contains(fmt.Sprint(args[3]), ":ld:")
}

func (c *cutConn) Send(cmd string, args ...any) error {
	if isLoad(cmd, args) {
		c.sent++
	}
	return c.Conn.Send(cmd, args...)
}

func (c *cutConn) cut(r any, err error) (any, error) {
	if err != nil || c.sent == 0 {
		return r, err
	}
	c.sent--
	if c.armed.Add(-1) == 0 {
		c.Conn.Close()
		return nil, errors.New("injected: connection lost after the chunk was applied")
	}
	return r, err
}

func (c *cutConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}
func (c *cutConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}
func (c *cutConn) Receive() (any, error) { return c.cut(c.Conn.Receive()) }
func (c *cutConn) ReceiveContext(ctx context.Context) (any, error) {
	return c.cut(redis.ReceiveContext(c.Conn, ctx))
}
func (c *cutConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return c.cut(redis.ReceiveWithTimeout(c.Conn, d))
}

func cutPool(armed *atomic.Int32) *redis.Pool {
	pool := &redis.Pool{
		MaxIdle: 4,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialURLContext(ctx, srv.URL)
			if err != nil {
				return nil, err
			}
			return &cutConn{Conn: c, armed: armed}, nil
		},
	}
	DeferCleanup(pool.Close)
	return pool
}

var _ = Describe("Bulk load (issue 15)", func() {
	It("enqueues every line exactly once across an interruption, a resume and a lost connection", func(ctx SpecContext) {
		e := newEnv()
		input, want := loadInput(25_000)
		opts := &load.Options{Name: "big", Chunk: 500, Window: 8}

		// A first run stops after a few chunks (Ctrl-C).
		stopCtx, stop := context.WithCancel(ctx)
		chunks := 0
		first := *opts
		first.Progress = func(p load.Progress) {
			if chunks++; chunks == 5 {
				stop()
			}
		}
		p, err := load.Run(stopCtx, e.client, "load", bytes.NewReader(input), &first)
		stop()
		Expect(err).To(MatchError(context.Canceled))
		var le *load.Error
		Expect(errors.As(err, &le)).To(BeTrue())
		Expect(p.Enqueued).To(BeNumerically(">=", 5*500))
		Expect(p.Enqueued).To(BeNumerically("<", 25_000))
		Expect(e.payloads("load")).To(HaveLen(int(p.Enqueued)), "what the first run says it enqueued is there")

		// Started again without --resume: refused, nothing changes.
		_, err = load.Run(ctx, e.client, "load", bytes.NewReader(input), opts)
		Expect(err).To(MatchError(load.ErrExists))
		Expect(err.Error()).To(ContainSubstring(`"big" is at line`))
		// Resumed with another input: refused.
		other, _ := loadInput(100)
		_, err = load.Run(ctx, e.client, "load", bytes.NewReader(other), &load.Options{Name: "big", Resume: true})
		Expect(err).To(MatchError(ContainSubstring("made from another input")))

		// Resumed on a connection that breaks after Redis applied the third
		// chunk it receives (and the chunks sent behind it): the checkpoint
		// says what was applied, nothing is sent twice or skipped.
		var armed atomic.Int32
		armed.Store(3)
		lossy, err := worqr.NewClient(cutPool(&armed), &worqr.Config{Namespace: e.ns, Logger: e.logger})
		Expect(err).NotTo(HaveOccurred())
		resume := *opts
		resume.Resume = true
		p2, err := load.Run(ctx, lossy, "load", bytes.NewReader(input), &resume)
		Expect(err).NotTo(HaveOccurred())
		Expect(armed.Load()).To(BeNumerically("<", 0), "the connection was cut")
		Expect(p2.Resumed).To(BeNumerically(">=", p.Enqueued), "the first run's lines are skipped")
		Expect(p.Enqueued + p2.Enqueued).To(BeEquivalentTo(25_000))
		Expect(p2.Empty).To(BeNumerically(">", 0))

		sort.Strings(want)
		Expect(e.payloads("load")).To(Equal(want), "every line once")

		// Resumed once more: nothing to do.
		p3, err := load.Run(ctx, e.client, "load", bytes.NewReader(input), &resume)
		Expect(err).NotTo(HaveOccurred())
		Expect(p3.Enqueued).To(BeZero())
		Expect(e.waiting("load")).To(HaveLen(25_000))

		// The tasks run like any others, each with its line (counted by id:
		// a worker that loses its keepalive on a busy machine has its tasks
		// run again). Taken, a task gets its own hash; the packed hashes
		// are gone once every task was taken.
		var mu sync.Mutex
		ran := map[string]string{}
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"load": {Concurrency: 20, Handler: worqr.HandlerFunc(
			func(_ context.Context, t *worqr.Task) error {
				mu.Lock()
				defer mu.Unlock()
				ran[t.ID] = string(t.Payload)
				return nil
			})}}, nil))
		Eventually(ctx, func() int { mu.Lock(); defer mu.Unlock(); return len(ran) }).WithTimeout(60 * time.Second).Should(Equal(25_000))
		mu.Lock()
		got := make([]string, 0, len(ran))
		for _, p := range ran {
			got = append(got, p)
		}
		mu.Unlock()
		sort.Strings(got)
		Expect(got).To(Equal(want), "every line ran with its payload")
		Expect(e.keysWith(":lb:")).To(BeEmpty(), "no packed hash left")
	}, SpecTimeout(120*time.Second))

	It("makes ids of its own for each run: the same input loaded again under the same name after its checkpoint was deleted", func(ctx SpecContext) {
		e := newEnv()
		input, want := loadInput(3_000)
		opts := &load.Options{Name: "again"}
		for range 2 {
			p, err := load.Run(ctx, e.client, "twice", bytes.NewReader(input), opts)
			Expect(err).NotTo(HaveOccurred(), "a second run in the same second makes other ids: none of them waits already")
			Expect(p.Enqueued).To(BeEquivalentTo(len(want)))
			Expect(e.st.DeleteLoadState(ctx, e.qk("twice"), "again")).To(Succeed())
		}
		ids := e.waiting("twice")
		Expect(ids).To(HaveLen(2 * len(want)))
		distinct := map[string]bool{}
		for _, id := range ids {
			distinct[id] = true
		}
		Expect(distinct).To(HaveLen(2*len(want)), "no id made twice")
		twice := append(append([]string{}, want...), want...)
		sort.Strings(twice)
		Expect(e.payloads("twice")).To(Equal(twice))
	}, SpecTimeout(30*time.Second))

	It("stops feeding while the queue holds MaxWaiting tasks and goes on as workers drain it", func(ctx SpecContext) {
		e := newEnv()
		input, _ := loadInput(6_000)
		const limit, chunk = 1_000, 100
		var (
			mu      sync.Mutex
			waited  bool
			maxSeen int
		)
		done := make(chan error, 1)
		go func() {
			_, err := load.Run(ctx, e.client, "held", bytes.NewReader(input), &load.Options{
				Name: "held", Chunk: chunk, MaxWaiting: limit,
				Progress: func(p load.Progress) {
					n, _ := redis.Int(e.do("LLEN", e.qk("held").Waiting))
					mu.Lock()
					defer mu.Unlock()
					waited = waited || p.Waiting
					maxSeen = max(maxSeen, n)
				},
			})
			done <- err
		}()
		Eventually(ctx, func() bool { mu.Lock(); defer mu.Unlock(); return waited }).WithTimeout(10 * time.Second).Should(BeTrue())
		Expect(e.waiting("held")).To(HaveLen(limit), "with no worker the load stops at the limit")
		Consistently(ctx, done).WithTimeout(300 * time.Millisecond).ShouldNot(Receive())

		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"held": {Concurrency: 10, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return nil })}}, nil))
		Eventually(ctx, done).WithTimeout(60 * time.Second).Should(Receive(BeNil()))
		mu.Lock()
		defer mu.Unlock()
		Expect(maxSeen).To(BeNumerically("<=", limit+chunk), "Redis never held more than the limit and one chunk")
	}, SpecTimeout(90*time.Second))

	It("refuses a line that is not JSON with --format jsonl, keeps the lines before it, and resumes after a fix", func(ctx SpecContext) {
		e := newEnv()
		bad := []byte("{\"a\":1}\n[2]\n\n\"three\"\n{oops\n{\"b\":5}\n")
		opts := &load.Options{Name: "j", Format: load.JSONLines, Chunk: 2}
		_, err := load.Run(ctx, e.client, "json", bytes.NewReader(bad), opts)
		var le *load.Error
		Expect(errors.As(err, &le)).To(BeTrue())
		Expect(le.Line).To(BeEquivalentTo(5))
		Expect(err).To(MatchError(worqr.ErrInvalid))
		Expect(err.Error()).To(ContainSubstring("line 5"))
		Expect(e.payloads("json")).To(ConsistOf(`"three"`, `[2]`, `{"a":1}`), "the chunks before the bad line")

		// Fixed, the same input goes on from line 5.
		fixed := bytes.Replace(bad, []byte("{oops"), []byte(`{"c":4}`), 1)
		p, err := load.Run(ctx, e.client, "json", bytes.NewReader(fixed), &load.Options{Name: "j", Format: load.JSONLines, Resume: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Enqueued).To(BeEquivalentTo(2))
		Expect(e.payloads("json")).To(ConsistOf(`"three"`, `[2]`, `{"a":1}`, `{"c":4}`, `{"b":5}`))
		// Another input under the same name is refused: another first line,
		// or the same first line but another last loaded line.
		_, err = load.Run(ctx, e.client, "json", strings.NewReader("{\"z\":0}\n"), &load.Options{Name: "j", Resume: true})
		Expect(err).To(MatchError(ContainSubstring("its first line differs")))
		_, err = load.Run(ctx, e.client, "json", strings.NewReader("{\"a\":1}\n[2]\n\n\"three\"\n{\"c\":4}\n{\"b\":6}\n7\n"), &load.Options{Name: "j", Resume: true})
		Expect(err).To(MatchError(ContainSubstring("line 6, the last it loaded, differs")))
		// A resume under a name with no checkpoint starts nothing over.
		_, err = load.Run(ctx, e.client, "json", bytes.NewReader(fixed), &load.Options{Name: "k", Format: load.JSONLines, Resume: true})
		Expect(err).To(MatchError(load.ErrNotFound))
		Expect(e.payloads("json")).To(HaveLen(5), "nothing enqueued by a resume of nothing")

		_, err = load.Run(ctx, e.client, "json", bytes.NewReader(bad), &load.Options{Name: "bad name"})
		Expect(err).To(MatchError(worqr.ErrInvalid))
		Expect(err.Error()).To(ContainSubstring("Name"))
		_, err = load.Run(ctx, e.client, "json", bytes.NewReader(bad), &load.Options{Name: "x", Chunk: 5000})
		Expect(err).To(MatchError(ContainSubstring("Chunk")))
	}, SpecTimeout(20*time.Second))

	It("writes nothing when a task id of the chunk is waiting already (no silent overwrite)", func(ctx SpecContext) {
		e := newEnv()
		qk := e.qk("clash")
		rep, err := e.st.LoadChunk(ctx, qk, &rdb.LoadArgs{Name: "p", Fingerprint: "fp", TTLMillis: 60_000},
			&rdb.LoadChunk{First: 1, After: 2, IDs: []string{"taken"}, Payloads: [][]byte{[]byte("first")}})
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.Status).To(Equal(rdb.LoadApplied))
		a := &rdb.LoadArgs{Name: "c", Fingerprint: "fp", TTLMillis: 60_000}
		ch := &rdb.LoadChunk{First: 1, After: 3, IDs: []string{"new", "taken"}, Payloads: [][]byte{[]byte("a"), []byte("b")}}
		rep, err = e.st.LoadChunk(ctx, qk, a, ch)
		Expect(err).NotTo(HaveOccurred())
		Expect(rep).To(Equal(rdb.LoadReply{Status: rdb.LoadIDExists, ID: "taken"}))
		Expect(e.waiting("clash")).To(Equal([]string{"taken"}))
		key, field := qk.Packed("taken")
		Expect(redis.String(e.do("HGET", key, field))).To(Equal("first"))
		key, field = qk.Packed("new")
		Expect(e.do("HEXISTS", key, field)).To(BeEquivalentTo(0))
		_, err = e.do("LPOP", qk.Waiting)
		Expect(err).NotTo(HaveOccurred())

		// The same chunk again after it was applied: seen, nothing new.
		ch.IDs[1] = "other"
		rep, err = e.st.LoadChunk(ctx, qk, a, ch)
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.Status).To(Equal(rdb.LoadApplied))
		rep, err = e.st.LoadChunk(ctx, qk, a, ch)
		Expect(err).NotTo(HaveOccurred())
		Expect(rep).To(Equal(rdb.LoadReply{Status: rdb.LoadSeen, Value: 3}))
		Expect(e.waiting("clash")).To(Equal([]string{"new", "other"}))
		// A chunk that does not start at the checkpoint: a gap.
		rep, err = e.st.LoadChunk(ctx, qk, a, &rdb.LoadChunk{First: 5, After: 6, IDs: []string{"z"}, Payloads: [][]byte{nil}})
		Expect(err).NotTo(HaveOccurred())
		Expect(rep).To(Equal(rdb.LoadReply{Status: rdb.LoadGap, Value: 3}))
	}, SpecTimeout(10*time.Second))
})

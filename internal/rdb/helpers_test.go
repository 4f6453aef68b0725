package rdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The helpers shared by this package's test files: a test's env (its
// namespace, store and raw connection) and the state-diff tables' dump and
// compare; flows; ordered queues; and the readers of what the server ran
// (MONITOR, INFO commandstats) that the cost tests use.

// The Redis values a state holds, by type. A state maps every key of a
// namespace to its value, so that comparing two states compares everything
// a script could have written, expiries included.
type (
	list []string          // LRANGE 0 -1, in order
	set  []string          // SMEMBERS, sorted
	hash map[string]string // HGETALL
	str  string            // GET
	zset []z               // ZRANGE 0 -1 WITHSCORES, in score order
)

// z is one member of a sorted set with its score as Redis prints it
// ("1700000000123", "inf").
type z struct{ M, S string }

// unordered is an expected zset whose order is not checked, members sorted
// by name: for members whose scores are times that may or may not differ
// (runs started one after the other within a millisecond or two).
type unordered []z

// runs is the expected <ns>:{T}:runs zset of runs started while seeding.
func runs(ids ...string) unordered {
	out := make(unordered, len(ids))
	for i, id := range ids {
		out[i] = z{id, "@seed"}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].M < out[j].M })
	return out
}

// expiring is a key with a TTL: V is its value, TTL its PTTL in ms.
type expiring struct {
	V   any
	TTL int64
}

// ttl wraps an expected value whose key expires in ms milliseconds: the
// key's PTTL must be in (ms - ttlSlack, ms], or, when more Redis time passed
// since the test began (a loaded machine), in (ms - that time, ms]. A key
// without a TTL must not be wrapped, and a key with one must be.
func ttl(v any, ms int64) expiring { return expiring{V: v, TTL: ms} }

// ttlSlack is how much a TTL may have run down between the script that set
// it and the dump that reads it, at least: no key of the test's namespace
// was set before the test began, so a TTL may also have run down by the
// Redis time since then (env.ran), however long that was.
const ttlSlack = 5000

// Time placeholders. Where a script writes Redis time, an expected hash
// value or zset score can be "@now" (the Redis time of the call under test,
// between the TIME read just before it and the one just after) or "@seed"
// (between the test's start and the call: set while seeding) or "@ran"
// (from the test's start to when the state was read, for a time the test
// is not about, such as when a taking started), each with an
// optional offset in ms: "@now+5000", "@seed-120000".

type state map[string]any

func formatValue(v any) string {
	switch x := v.(type) {
	case list:
		return fmt.Sprintf("list %q", []string(x))
	case set:
		return fmt.Sprintf("set %q", []string(x))
	case hash:
		return fmt.Sprintf("hash %q", map[string]string(x)) // fmt sorts map keys
	case str:
		return fmt.Sprintf("string %q", string(x))
	case zset:
		parts := make([]string, len(x))
		for i, m := range x {
			parts[i] = fmt.Sprintf("%q:%s", m.M, m.S)
		}
		return "zset [" + strings.Join(parts, " ") + "]"
	case unordered:
		return formatValue(zset(x)) + " (any order)"
	case expiring:
		return fmt.Sprintf("%s (pttl %dms)", formatValue(x.V), x.TTL)
	default:
		return fmt.Sprintf("%T %v", x, x)
	}
}

func (s state) format(ns string) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s = %s\n", strings.TrimPrefix(k, ns+":"), formatValue(s[k]))
	}
	if len(keys) == 0 {
		b.WriteString("  (no keys)\n")
	}
	return b.String()
}

// with returns a copy of s with more keys (a nil value deletes the key).
func (s state) with(kv ...any) state {
	out := state{}
	for k, v := range s {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// env is one test's private namespace on the shared server: the store under
// test, a raw connection for seeding and reading, the keys of the
// stand-alone queue "q", and the Redis times that "@seed" and "@now" stand
// for. The store runs on a pool that checks what it sends (see routed).
type env struct {
	ctx  context.Context
	pool *redis.Pool
	c    redis.Conn
	ns   string
	k    rdb.Keys
	q    rdb.QueueKeys
	st   *rdb.Store
	// start is the Redis time (ms) when the test began; t0 and t1 bracket
	// the call under test (see call).
	start, t0, t1 int64
	// ran is the Redis time (ms) from start to the end of the last state
	// read (checkState): how far any TTL may have run down by then.
	ran int64
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	c, err := pool.GetContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns := redistest.Namespace()
	k := rdb.NewKeys(ns)
	e := &env{ctx: ctx, pool: pool, c: c, ns: ns, k: k, q: k.Queue(rdb.Standalone("q")),
		st: rdb.NewStore(routed{pool: pool, t: t, ns: ns}, ns)}
	e.start = e.now(t)
	return e
}

// routed is the pool a test's store runs on. It is a TagConnGetter, so the
// store must ask for each connection by the hash tag of its call, and every
// connection it hands out fails the test when a command names a key or a
// channel of the namespace (in KEYS or in ARGV: key prefixes, channels)
// outside that tag: the routing a Redis Cluster client relies on. Beneath
// it, redistest's TagCheckedPool fails a script call whose KEYS span tags.
type routed struct {
	pool *redis.Pool
	t    interface {
		Errorf(format string, args ...any)
	}
	ns string
}

func (r routed) GetContext(ctx context.Context) (redis.Conn, error) {
	r.t.Errorf("store asked for a connection without naming the hash tag of its call")
	return r.pool.GetContext(ctx)
}

func (r routed) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &routedConn{Conn: c, r: r, tag: tag}, nil
}

type routedConn struct {
	redis.Conn
	r   routed
	tag string
}

func (c *routedConn) check(cmd string, args []any) {
	for _, a := range args {
		s, ok := a.(string)
		if !ok || !strings.HasPrefix(s, c.r.ns+":") {
			continue
		}
		if tag := rdb.HashTag(s); tag != c.tag {
			c.r.t.Errorf("%s on a connection for tag %q names %q (tag %q)", cmd, c.tag, s, tag)
		}
	}
}

func (c *routedConn) Do(cmd string, args ...any) (any, error) {
	c.check(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *routedConn) Send(cmd string, args ...any) error {
	c.check(cmd, args)
	return c.Conn.Send(cmd, args...)
}

func (c *routedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.check(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *routedConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.check(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *routedConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *routedConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// now returns the Redis server time in ms, as the scripts compute it.
func (e *env) now(t testing.TB) int64 {
	t.Helper()
	v, err := redis.Int64s(e.c.Do("TIME"))
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	return v[0]*1000 + v[1]/1000
}

// call runs the call under test and records the Redis times around it.
func (e *env) call(t *testing.T, f func()) {
	t.Helper()
	e.t0 = e.now(t)
	f()
	e.t1 = e.now(t)
}

// pipe sends cmds in one round trip and returns the replies.
func (e *env) pipe(t *testing.T, cmds [][]any) []any {
	t.Helper()
	for _, cmd := range cmds {
		if err := e.c.Send(cmd[0].(string), cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.Flush(); err != nil {
		t.Fatal(err)
	}
	out := make([]any, len(cmds))
	for i := range cmds {
		var err error
		if out[i], err = e.c.Receive(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// dump reads every key of the namespace with its TTL, in two pipelined
// round trips.
func (e *env) dump(t *testing.T) state {
	t.Helper()
	keys, err := redistest.Keys(e.ctx, e.c, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	var meta [][]any
	for _, k := range keys {
		meta = append(meta, []any{"TYPE", k}, []any{"PTTL", k})
	}
	metas := e.pipe(t, meta)
	reads := make([][]any, len(keys))
	for i, k := range keys {
		typ, _ := redis.String(metas[2*i], nil)
		switch typ {
		case "list":
			reads[i] = []any{"LRANGE", k, 0, -1}
		case "set":
			reads[i] = []any{"SMEMBERS", k}
		case "hash":
			reads[i] = []any{"HGETALL", k}
		case "string":
			reads[i] = []any{"GET", k}
		case "zset":
			reads[i] = []any{"ZRANGE", k, 0, -1, "WITHSCORES"}
		case "none":
			reads[i] = []any{"EXISTS", k} // expired between SCAN and TYPE
		default:
			t.Fatalf("key %s has unexpected type %s", k, typ)
		}
	}
	vals := e.pipe(t, reads)
	st := state{}
	for i, k := range keys {
		var v any
		var err error
		switch reads[i][0] {
		case "LRANGE":
			var l []string
			l, err = redis.Strings(vals[i], nil)
			v = list(l)
		case "SMEMBERS":
			var m []string
			m, err = redis.Strings(vals[i], nil)
			sort.Strings(m)
			v = set(m)
		case "HGETALL":
			var m map[string]string
			m, err = redis.StringMap(vals[i], nil)
			v = hash(m)
		case "GET":
			var s string
			s, err = redis.String(vals[i], nil)
			v = str(s)
		case "ZRANGE":
			var flat []string
			flat, err = redis.Strings(vals[i], nil)
			zs := zset{}
			for j := 0; j+1 < len(flat); j += 2 {
				zs = append(zs, z{flat[j], flat[j+1]})
			}
			v = zs
		default:
			continue
		}
		if err != nil {
			t.Fatalf("reading %s: %v", k, err)
		}
		if pttl, _ := redis.Int64(metas[2*i+1], nil); pttl > 0 {
			v = expiring{V: v, TTL: pttl}
		}
		st[k] = v
	}
	return st
}

// timeOK reports whether got is a time (ms) that placeholder want allows.
func (e *env) timeOK(got, want string) bool {
	if !strings.HasPrefix(want, "@") {
		return false
	}
	name, off := want[1:], int64(0)
	if i := strings.IndexAny(name, "+-"); i >= 0 {
		n, err := strconv.ParseInt(name[i:], 10, 64)
		if err != nil {
			return false
		}
		name, off = name[:i], n
	}
	var lo, hi int64
	switch name {
	case "now":
		lo, hi = e.t0, e.t1
	case "seed":
		lo, hi = e.start, e.t0
	case "ran":
		lo, hi = e.start, e.start+e.ran
	default:
		return false
	}
	g, err := strconv.ParseInt(got, 10, 64)
	return err == nil && lo > 0 && g >= lo+off && g <= hi+off
}

// attemptMark starts the placeholder of an attempt history entry (see
// attempt).
const attemptMark = "@attempt"

// attempt is the expected value of an attempt history field (h0..h9, see
// history.lua): attempt n, ended with outcome by worker w with error err,
// started and ended during the test, by the time its state is read (a
// start of 0, unknown, is allowed: a hash seeded without one).
func attempt(n int, outcome, w, err string) string {
	b, _ := json.Marshal(rdb.Attempt{Number: n, Outcome: outcome, Worker: w, Error: err})
	return attemptMark + string(b)
}

// attemptOK reports whether got is the history entry the placeholder want
// (see attempt) allows.
func (e *env) attemptOK(got, want string) bool {
	spec, ok := strings.CutPrefix(want, attemptMark)
	if !ok {
		return false
	}
	var w rdb.Attempt
	if err := json.Unmarshal([]byte(spec), &w); err != nil {
		return false
	}
	g, err := rdb.DecodeAttempt(got)
	if err != nil {
		return false
	}
	in := func(ms int64) bool { return ms >= e.start && ms <= e.start+e.ran }
	return g.Number == w.Number && g.Outcome == w.Outcome && g.Worker == w.Worker && g.Error == w.Error &&
		in(g.EndedAt) && (g.StartedAt == 0 || in(g.StartedAt) && g.StartedAt <= g.EndedAt)
}

// settle returns got with every value that satisfies a placeholder or a
// TTL range of want replaced by want's, so that a DeepEqual compares the
// rest exactly and a diff shows only real differences.
func (e *env) settle(got, want any) any {
	switch w := want.(type) {
	case expiring:
		g, ok := got.(expiring)
		if !ok {
			return got
		}
		g.V = e.settle(g.V, w.V)
		if g.TTL <= w.TTL && g.TTL > w.TTL-max(ttlSlack, e.ran+1) {
			g.TTL = w.TTL
		}
		return g
	case hash:
		g, ok := got.(hash)
		if !ok {
			return got
		}
		out := hash{}
		for f, v := range g {
			if wv, ok := w[f]; ok && (e.timeOK(v, wv) || e.attemptOK(v, wv)) {
				v = wv
			}
			out[f] = v
		}
		return out
	case unordered:
		g, ok := got.(zset)
		if !ok || len(g) != len(w) {
			return got
		}
		out := append(unordered(nil), g...)
		sort.Slice(out, func(i, j int) bool { return out[i].M < out[j].M })
		for i, m := range out {
			if m.M == w[i].M && (m.S == w[i].S || e.timeOK(m.S, w[i].S)) {
				out[i].S = w[i].S
			}
		}
		return out
	case zset:
		g, ok := got.(zset)
		if !ok || len(g) != len(w) {
			return got
		}
		out := make(zset, len(g))
		for i, m := range g {
			if m.M == w[i].M && e.timeOK(m.S, w[i].S) {
				m.S = w[i].S
			}
			out[i] = m
		}
		return out
	}
	return got
}

// Every state-diff table (TestEnqueue, TestTake, TestEndTask, TestRequeue,
// TestCancel, ...) seeds Redis, snapshots it, runs one wrapper, then checks
// the wrapper's result, the whole namespace (state: nil means "nothing
// changed") and every message published on the namespace's channels (pubs:
// nil means "none").

// checkState compares the namespace with want, or with before when want is
// nil (the call must have changed nothing).
func (e *env) checkState(t *testing.T, before state, want func(e *env) state) {
	t.Helper()
	w := before
	if want != nil {
		w = want(e)
	}
	got := e.dump(t)
	e.ran = e.now(t) - e.start
	for k, v := range got {
		got[k] = e.settle(v, w[k])
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("redis state:\ngot:\n%swant:\n%s", got.format(e.ns), w.format(e.ns))
	}
}

// do runs a raw command and fails the test on error.
func (e *env) do(t testing.TB, cmd string, args ...any) any {
	t.Helper()
	v, err := e.c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

func payload(id string) string { return "p" + id }

// Seeding helpers: they call the store and fail the test on error.

// enqueueTo enqueues ids (payload "p"+id) into q with the given options.
func (e *env) enqueueTo(t testing.TB, q rdb.QueueKeys, a *rdb.EnqueueArgs, ids ...string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i, id := range ids {
		ps[i] = []byte(payload(id))
	}
	if _, err := e.st.Enqueue(e.ctx, q, ids, ps, a); err != nil {
		t.Fatal(err)
	}
}

func (e *env) enqueue(t testing.TB, ids ...string) { t.Helper(); e.enqueueTo(t, e.q, nil, ids...) }

// uniqueKey is the full unique key of user key k in queue q.
func uniqueKey(q rdb.QueueKeys, k string) string { return q.UniquePrefix + k }

// enqueueUnique enqueues id under unique key k (TTL one minute).
func (e *env) enqueueUnique(t *testing.T, id, k string) {
	t.Helper()
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{UniqueKey: k, UniqueTTL: 60000}, id)
}

// enqueueDue enqueues ids into the scheduled set, due at unix ms due.
func (e *env) enqueueDue(t *testing.T, due int64, ids ...string) {
	t.Helper()
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DueMillis: due}, ids...)
}

func (e *env) takeFrom(t testing.TB, q rdb.QueueKeys, w string, max int, stage bool) []rdb.Taken {
	t.Helper()
	got, err := e.st.Take(e.ctx, q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: max, Stage: stage})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *env) take(t *testing.T, w string, max int) { t.Helper(); e.takeFrom(t, e.q, w, max, false) }

// endIn ends takings of queue q in one End call (retention ms for ended
// tasks) and fails the test on an error or when one of them was lost.
func (e *env) endIn(t testing.TB, q rdb.QueueKeys, retention int64, es ...rdb.Ending) []rdb.Ended {
	t.Helper()
	got, err := e.st.End(e.ctx, q, retention, es)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g.Outcome == rdb.OutcomeLost {
			t.Fatalf("End %+v: lost", es[i])
		}
	}
	return got
}

// endTask ends a taking of task id of queue "q", kept retention ms once ended.
func (e *env) endTask(t testing.TB, retention int64, end rdb.Ending) {
	t.Helper()
	e.endIn(t, e.q, retention, end)
}

func (e *env) finish(t *testing.T, w, pid, id string) {
	t.Helper()
	e.endTask(t, 0, rdb.Done(rdb.KindTask, w, pid, id, nil))
}

func (e *env) giveBack(t *testing.T, w, pid, id string) {
	t.Helper()
	e.endTask(t, 0, rdb.GiveBack(rdb.KindTask, w, pid, id))
}

func (e *env) requeue(t *testing.T, crashed bool, ws ...string) {
	t.Helper()
	if _, _, err := e.st.Requeue(e.ctx, e.q, ws, crashed); err != nil {
		t.Fatal(err)
	}
}

func (e *env) cancel(t *testing.T, id string) {
	t.Helper()
	if _, err := e.st.Cancel(e.ctx, e.q, id); err != nil {
		t.Fatal(err)
	}
}

// setCfg writes fields of queue q's config hash, as a worker does.
func (e *env) setCfg(t testing.TB, q rdb.QueueKeys, kv ...any) {
	t.Helper()
	e.do(t, "HSET", append([]any{q.Config}, kv...)...)
}

// seedDead puts id straight into q's dead set with score at (unix ms) and
// the hash deadSeed(id, at).
func (e *env) seedDead(t *testing.T, q rdb.QueueKeys, id string, at int64) {
	t.Helper()
	args := []any{q.Task(id)}
	for k, v := range deadSeed(id, strconv.FormatInt(at, 10)) {
		args = append(args, k, v)
	}
	e.do(t, "HSET", args...)
	e.do(t, "ZADD", q.Dead, at, id)
}

// Expected task hashes.

// fresh is the hash of a task that was enqueued and never taken.
func fresh(id string) hash { return hash{"d": payload(id)} }

// active is the hash of a task worker w holds as taking pid, taken
// during the test.
func active(id, w, pid string) hash {
	return hash{"d": payload(id), "s": "active", "w": w, "p": pid}.started()
}

// ran is the hash of a task that was enqueued, then taken during the
// test (its start time kept) and is no longer held.
func ran(id string) hash { return fresh(id).started() }

// started returns h with the start time of a taking handed out during
// the test.
func (h hash) started() hash { return h.with("sa", "@ran") }

// tried returns h with one more failed attempt in its history: attempt n,
// ended with outcome by worker w with error err (see attempt).
func (h hash) tried(n int, outcome, w, err string) hash {
	seq, _ := strconv.Atoi(h["hn"])
	return h.with("hn", strconv.Itoa(seq+1), "h"+strconv.Itoa(seq%rdb.HistoryMax), attempt(n, outcome, w, err))
}

// queued is the hash of a task that was taken and put back.
func queued(id string) hash { return hash{"d": payload(id), "s": "queued"} }

// deadSeed is the hash seedDead writes: a task that failed three times on
// worker A, died at time at, and held a unique key.
func deadSeed(id, at string) hash {
	return hash{"d": payload(id), "s": "dead", "n": "3", "c": "1", "e": "boom",
		"dr": "failed", "dt": at, "dw": "A", "u": "u-" + id}
}

// with returns a copy of h with more fields.
func (h hash) with(kv ...string) hash {
	out := hash{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// without returns a copy of h without the given fields.
func (h hash) without(fields ...string) hash {
	out := h.with()
	for _, f := range fields {
		delete(out, f)
	}
	return out
}

// buried is h as bury leaves it: in the dead set for reason, by worker w,
// at the call's time.
func (h hash) buried(reason, w string) hash {
	return h.without("w", "p", "x").with("s", "dead", "dr", reason, "dt", "@now", "dw", w)
}

// msg is one pub/sub message. Channel is "wake" or "cancel" for queue q's
// channels, else the channel name without the namespace ("{F}:wake:s2").
type msg struct{ Channel, Data string }

// listener receives every message published on a channel of the namespace.
type listener struct {
	psc      redis.PubSubConn
	ns       string
	names    map[string]string
	sentinel string
}

func (e *env) listen(t *testing.T) *listener {
	t.Helper()
	c, err := redis.DialURLContext(e.ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l := &listener{
		psc:      redis.PubSubConn{Conn: c},
		ns:       e.ns,
		names:    map[string]string{e.q.WakeChannel: "wake", e.q.CancelChannel: "cancel"},
		sentinel: e.ns + ":sentinel",
	}
	if err := l.psc.PSubscribe(e.ns + ":*"); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 1; {
		switch v := l.psc.ReceiveWithTimeout(5 * time.Second).(type) {
		case redis.Subscription:
			n++
		case error:
			t.Fatal(v)
		}
	}
	return l
}

// collect returns every message published since listen. It publishes a
// sentinel and reads up to it: Redis delivers one connection's messages in
// publish order, so anything a script published arrives before it.
func (l *listener) collect(t *testing.T, e *env) []msg {
	t.Helper()
	e.do(t, "PUBLISH", l.sentinel, "end")
	var out []msg
	for {
		switch v := l.psc.ReceiveWithTimeout(5 * time.Second).(type) {
		case redis.Message:
			if v.Channel == l.sentinel {
				return out
			}
			name, ok := l.names[v.Channel]
			if !ok {
				name = strings.TrimPrefix(v.Channel, l.ns+":")
			}
			out = append(out, msg{name, string(v.Data)})
		case error:
			t.Fatal(v)
		}
	}
}

func checkPubs(t *testing.T, got, want []msg) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

// checkPubsAnyOrder is checkPubs for scripts that publish in Lua table
// order (one wake-up per queue of a fan-out).
func checkPubsAnyOrder(t *testing.T, got, want []msg) {
	t.Helper()
	sorted := func(m []msg) []msg {
		out := append([]msg(nil), m...)
		sort.Slice(out, func(i, j int) bool {
			return out[i].Channel+"\x00"+out[i].Data < out[j].Channel+"\x00"+out[j].Data
		})
		return out
	}
	checkPubs(t, sorted(got), sorted(want))
}

// Takings and runs in tables.

// far is a due time in the far future (2100-01-01), never due in a test.
const far = 4102444800000

// taken is rdb.Taken with comparable fields.
type taken struct {
	ID, PID, Reason, Payload      string
	Attempt, Crashes, MaxAttempts int
	TimeoutMs                     int64
	Parent                        string
	Run                           hash
	Meta                          string
}

// takenOf converts Take's result for comparison.
func takenOf(res []rdb.Taken) []taken {
	got := make([]taken, len(res))
	for i, r := range res {
		got[i] = taken{r.ID, r.PID, r.Reason, string(r.Payload), r.Attempt, r.Crashes,
			r.MaxAttempts, r.TimeoutMs, r.Parent, nil, r.Meta}
		if r.Run != nil {
			got[i].Run = hash(r.Run)
		}
	}
	return got
}

// startRun starts flow run id in e.q (its first stage), without state
// fields or index, kept one minute once ended.
func (e *env) startRun(t *testing.T, id string) {
	t.Helper()
	if ok, err := e.st.FlowStart(e.ctx, e.q, id, nil, rdb.FlowRef{RetentionMillis: 60000}); err != nil || !ok {
		t.Fatalf("FlowStart %s: %v, %v", id, ok, err)
	}
}

// Flows.

// flowEnv is env plus a flow of tag F: stages s1 and s2, child queues c1
// and c2, runs indexed by their "user" field, kept one minute once ended.
type flowEnv struct {
	*env
	s1, s2, c1, c2 rdb.QueueKeys
	ix             string // the index of user u1
	ref            rdb.FlowRef
	// next and failFast are how fanOut fanned r1 out: the run's next stage
	// and the policy, stored on each child.
	next     string
	failFast bool
}

func newFlowEnv(t testing.TB) *flowEnv {
	e := newEnv(t)
	q := func(name string) rdb.QueueKeys { return e.k.Queue(rdb.QueueRef{Tag: "F", Name: name}) }
	f := &flowEnv{env: e, s1: q("s1"), s2: q("s2"), c1: q("c1"), c2: q("c2"),
		ref: rdb.FlowRef{RetentionMillis: 60000, IndexBy: []string{"user"}}}
	f.ix = f.s1.IndexKey("user", "u1")
	return f
}

// start starts run id of user u1 in stage queue q.
func (f *flowEnv) start(t testing.TB, q rdb.QueueKeys, id string) {
	t.Helper()
	ok, err := f.st.FlowStart(f.ctx, q, id, map[string]string{"user": "u1"}, f.ref)
	if err != nil || !ok {
		t.Fatalf("FlowStart %s: %v, %v", id, ok, err)
	}
}

// stage is e, a stage taking's ending, with what a stage of flowEnv's flow
// records: the next stage, the fan-out policy, the fields and the children.
func (f *flowEnv) stage(e rdb.Ending, next string, failFast bool, fields map[string]string, children ...rdb.Child) rdb.Ending {
	e.Stage = &rdb.StageEnd{Next: next, FailFast: failFast, RunRetentionMs: f.ref.RetentionMillis,
		IndexBy: f.ref.IndexBy, Fields: rdb.StateFields(fields), Children: children}
	return e
}

// endStage ends a taking of stage s1 (the ending e of kind stage) towards
// next.
func (f *flowEnv) endStage(t *testing.T, e rdb.Ending, next string, failFast bool, children ...rdb.Child) {
	t.Helper()
	f.endIn(t, f.s1, 0, f.stage(e, next, failFast, nil, children...))
}

// endChild ends a taking of a child of run r1 in child queue q.
func (f *flowEnv) endChild(t *testing.T, q rdb.QueueKeys, e rdb.Ending) {
	t.Helper()
	e.Run = "r1"
	f.endIn(t, q, 0, e)
}

func (f *flowEnv) runCancel(t testing.TB, id string) {
	t.Helper()
	if r, err := f.st.RunCancel(f.ctx, f.s1, id, f.ref); err != nil || !r.Cancelled {
		t.Fatalf("RunCancel %s: %+v, %v", id, r, err)
	}
}

// children are the three children r1's first stage fans out: k1 and k2 in
// c1, k3 in c2.
var children = []rdb.Child{
	{ID: "k1", Queue: "c1", Payload: []byte("pk1")},
	{ID: "k2", Queue: "c1", Payload: []byte("pk2")},
	{ID: "k3", Queue: "c2", Payload: []byte("pk3")},
}

// fanOut seeds run r1, taken by A in s1 (pid 1) and fanned out towards
// stage next with the given policy, and its child k1 taken by A (pid 2): the
// state fannedOut describes.
func (f *flowEnv) fanOut(t *testing.T, next string, failFast bool) {
	t.Helper()
	f.next, f.failFast = next, failFast
	f.start(t, f.s1, "r1")
	f.takeFrom(t, f.s1, "A", 1, true)
	f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), next, failFast, children...)
	f.takeFrom(t, f.c1, "A", 1, false)
}

// Expected run hashes: run r1 of user u1, in stage st, with the retention
// and indexed properties of flowEnv's FlowRef, and the value it is indexed
// by ('i:user', kept from the start).
func runQueued(st string) hash {
	return hash{"d": "", "st": st, "fs": "running", "s": "queued", "f:user": "u1", "fr": "60000", "fi": "user",
		"i:user": "u1"}
}

func runActive() hash { return runQueued("s1").with("s", "active", "w", "A", "p", "1").started() }

// runEnded is a run that ended with status at the call's time.
// (A failed run keeps its latest fan-out's list, 'kl', for RetryRun.)
func runEnded(h hash, status string) hash {
	if status != "failed" {
		h = h.without("kl")
	}
	return h.without("w", "p", "x").with("fs", status, "s", status, "ft", "@now")
}

func runFanned() hash {
	return runQueued("s1").started().with("s", "children", "kp", "3", "kg", "1", "kl", "g1 k1 k2 k3",
		"k:k1", "pending", "kq:k1", "c1", "k:k2", "pending", "kq:k2", "c1", "k:k3", "pending", "kq:k3", "c2")
}

// policy is how a fan-out policy is stored on a child ('pf').
func policy(failFast bool) string {
	if failFast {
		return "failfast"
	}
	return "continue"
}

// childOf is the hash of child id of run r1 as a fan-out towards stage next
// with the given policy creates it.
func childOf(id, next string, failFast bool) hash {
	return hash{"d": payload(id), "pr": "r1", "pn": next, "pf": policy(failFast), "pe": "1"}
}

// stateOf adapts a flow table's expected state to checkState.
func stateOf(f *flowEnv, want func(f *flowEnv) state) func(*env) state {
	if want == nil {
		return nil
	}
	return func(*env) state { return want(f) }
}

// runWithChildren writes n children's records (done, with a result) into
// run id's hash, as fan-outs leave them.
func (f *flowEnv) runWithChildren(t *testing.T, id string, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	args := []any{f.s1.Task(id)}
	for i := 0; i < n; i++ {
		c := id + ".c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, "res"+c)
	}
	f.do(t, "HSET", args...)
}

// Ordered queues and key batches.

// keyed enqueues one task of key with payload p and score sc ("" = now).
func (e *env) keyed(t testing.TB, key, id, p, sc string) rdb.KeyEnqueued {
	t.Helper()
	out, err := e.st.EnqueueKey(e.ctx, e.q, key, []string{id}, [][]byte{[]byte(p)}, []string{sc}, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("EnqueueKey %s %s: %v %v", key, id, out, err)
	}
	return out[0]
}

// entries reads task id's payload envelope as "payload:score" strings.
func (e *env) entries(t *testing.T, id string) []string {
	t.Helper()
	b, err := redis.Bytes(e.c.Do("HGET", e.q.Task(id), rdb.FieldPayload))
	if err != nil {
		t.Fatalf("HGET payload of %s: %v", id, err)
	}
	_, es, ok := rdb.DecodeEnvelope(b)
	if !ok {
		t.Fatalf("payload of %s is not an envelope: %q", id, b)
	}
	out := make([]string, len(es))
	for i, x := range es {
		out[i] = string(x.Payload) + ":" + rdb.FormatScore(x.Score)
	}
	return out
}

func (e *env) strs(t *testing.T, cmd string, args ...any) []string {
	t.Helper()
	v, err := redis.Strings(e.c.Do(cmd, args...))
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

func (e *env) field(t *testing.T, id, f string) string {
	t.Helper()
	v, _ := redis.String(e.c.Do("HGET", e.q.Task(id), f))
	return v
}

func (e *env) takeBatch(t *testing.T, w string, max, batch int) []rdb.Taken {
	t.Helper()
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: max, Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// batchOf returns the ending of the batch headed by got[0] (the members
// being got[1:]), built from ask.
func batchOf(head rdb.Ending, got []rdb.Taken) rdb.Ending {
	ms := make([]rdb.Member, 0, len(got)-1)
	for _, m := range got[1:] {
		ms = append(ms, rdb.Member{PID: m.PID, ID: m.ID, Result: []byte("r-" + m.ID)})
	}
	return head.WithBatch(ms)
}

func (e *env) list(t *testing.T, key string) []string {
	t.Helper()
	return e.strs(t, "LRANGE", e.q.KeyListPrefix+key, 0, -1)
}

func (e *env) waitingIDs(t *testing.T) []string {
	t.Helper()
	return e.strs(t, "LRANGE", e.q.Waiting, 0, -1)
}

// Takes, ids and loaded tasks.

func (e *env) takeArgs(t *testing.T, st *rdb.Store, a rdb.TakeArgs) ([]rdb.Taken, rdb.LimitWait) {
	t.Helper()
	if a.Until == 0 {
		a.Until = math.MaxInt64
	}
	got, wait, err := st.TakeWait(e.ctx, e.q, a)
	if err != nil {
		t.Fatal(err)
	}
	return got, wait
}

func takenIDs(ts []rdb.Taken) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.ID
	}
	return out
}

// ids returns n ids prefix00000, prefix00001, ... (sorted as numbered).
func ids(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, from+i)
	}
	return out
}

// loadIDs returns n consecutive xids, as a bulk load makes them (the line
// number in the last bytes): about 2,000 of them share a packed hash. Two
// calls within one second make the same ids (time and machine, then lines).
func loadIDs(n int) []string {
	base := xid.New().Bytes()
	out := make([]string, n)
	for i := range out {
		var b [12]byte
		copy(b[:], base)
		v := uint64(1000 + i)
		for j := 11; j >= 7; j-- {
			b[j] = byte(v)
			v >>= 8
		}
		id, _ := xid.FromBytes(b[:])
		out[i] = id.String()
	}
	return out
}

// packedKeys returns the packed hashes of the namespace and their fields.
func (e *env) packedKeys(t *testing.T) map[string]int {
	t.Helper()
	keys, err := redis.Strings(e.c.Do("KEYS", e.ns+":*:lb:*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, k := range keys {
		n, _ := redis.Int(e.c.Do("HLEN", k))
		out[k] = n
	}
	return out
}

// What the server ran: MONITOR sees every command, those inside scripts
// too; INFO commandstats counts them.

// monitorArgs parses the arguments of a MONITOR line ("..." quoted, with
// \" \\ \n \r \t \a \b \xHH escapes).
func monitorArgs(line string) []string {
	var out []string
	i := strings.Index(line, "] ")
	if i < 0 {
		return nil
	}
	s := line[i+2:]
	for len(s) > 0 {
		if s[0] != '"' {
			s = s[1:]
			continue
		}
		var b strings.Builder
		j := 1
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] != '\\' || j+1 >= len(s) {
				b.WriteByte(s[j])
				continue
			}
			j++
			switch s[j] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				v, _ := strconv.ParseUint(s[j+1:j+3], 16, 8)
				b.WriteByte(byte(v))
				j += 2
			default:
				b.WriteByte(s[j])
			}
		}
		out = append(out, b.String())
		if j+1 > len(s) {
			break
		}
		s = s[j+1:]
	}
	return out
}

// monitored runs f and returns, as MONITOR saw them, the commands (inside
// scripts too) that match keeps.
func monitored(t *testing.T, keep func(args []string) bool, f func()) [][]string {
	t.Helper()
	mon, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if _, err := mon.Do("MONITOR"); err != nil {
		t.Fatal(err)
	}
	f()
	marker := "monitored-done-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Do("ECHO", marker); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for {
		line, err := redis.String(redis.ReceiveWithTimeout(mon, 5*time.Second))
		if err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		args := monitorArgs(line)
		if len(args) == 2 && args[0] == "ECHO" && args[1] == marker {
			return out
		}
		if keep(args) {
			out = append(out, args)
		}
	}
}

// runCommands runs fn and returns the commands of namespace ns (inside
// scripts too).
func runCommands(t *testing.T, ns string, fn func()) [][]string {
	t.Helper()
	return monitored(t, func(args []string) bool { return len(args) > 1 && strings.HasPrefix(args[1], ns+":") }, fn)
}

// scriptCall is one script call seen by MONITOR: its name, its declared
// keys and the keys its commands touched.
type scriptCall struct {
	name     string
	declared map[string]bool
	touched  []string
	channels []string // published on
}

// keyAuditor watches every command of namespace ns through MONITOR.
type keyAuditor struct {
	t    *testing.T
	mon  redis.Conn
	keys redis.Conn // COMMAND GETKEYS
	ns   string
	step int
}

func newKeyAuditor(t *testing.T, ns string) *keyAuditor {
	mon, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mon.Do("MONITOR"); err != nil {
		t.Fatal(err)
	}
	kc, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Close(); kc.Close() })
	return &keyAuditor{t: t, mon: mon, keys: kc, ns: ns}
}

// calls returns the script calls of the namespace made since the last
// call of calls, up to a marker it sends.
func (a *keyAuditor) calls() []scriptCall {
	a.t.Helper()
	a.step++
	marker := fmt.Sprintf("audit-%s-%d", a.ns, a.step)
	if _, err := a.keys.Do("ECHO", marker); err != nil {
		a.t.Fatal(err)
	}
	var out []scriptCall
	var cur *scriptCall
	for {
		r, err := redis.String(redis.ReceiveWithTimeout(a.mon, 5*time.Second))
		if err != nil {
			a.t.Fatalf("MONITOR: %v", err)
		}
		args := monitorArgs(r)
		if len(args) == 0 {
			continue
		}
		if strings.Contains(r, "[0 lua]") {
			if cur != nil {
				cur.touched = append(cur.touched, a.keysOf(args)...)
				if c := strings.ToUpper(args[0]); (c == "PUBLISH" || c == "SPUBLISH") && len(args) > 1 {
					cur.channels = append(cur.channels, args[1])
				}
			}
			continue
		}
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
		cmd := strings.ToUpper(args[0])
		if cmd == "ECHO" && len(args) == 2 && args[1] == marker {
			return out
		}
		if (cmd == "FCALL" || cmd == "EVALSHA" || cmd == "EVAL") && len(args) >= 3 {
			n, _ := strconv.Atoi(args[2])
			if n < 1 || len(args) < 3+n || !strings.HasPrefix(args[3], a.ns+":") {
				continue
			}
			c := scriptCall{name: args[1], declared: map[string]bool{}}
			if parts := strings.SplitN(c.name, "_", 3); cmd == "FCALL" && len(parts) == 3 {
				c.name = parts[2] // worqr_<hex>_<script>
			}
			for _, k := range args[3 : 3+n] {
				c.declared[k] = true
			}
			cur = &c
		}
	}
}

// keysOf returns the keys of one command, as Redis finds them.
func (a *keyAuditor) keysOf(args []string) []string {
	cargs := make([]any, 0, len(args)+1)
	cargs = append(cargs, "GETKEYS")
	for _, s := range args {
		cargs = append(cargs, s)
	}
	keys, err := redis.Strings(a.keys.Do("COMMAND", cargs...))
	if err != nil {
		return nil // no key (TIME, PUBLISH...)
	}
	return keys
}

// kind is the part of a key after "<ns>:{tag}:" up to the next ':' (t, q,
// u, ix...).
func kind(key string) string {
	_, rest, _ := strings.Cut(key, "}:")
	k, _, _ := strings.Cut(rest, ":")
	return k
}

// undeclared returns the kinds of the keys calls touched without declaring
// them, per script, as "script:kind".
func undeclared(calls []scriptCall) []string {
	set := map[string]bool{}
	for _, c := range calls {
		for _, k := range c.touched {
			if !c.declared[k] {
				set[c.name+":"+kind(k)] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// commandCalls is how many times the server ran command cmd (lower case:
// "lrem", "fcall", "wait"), those inside scripts included (INFO
// commandstats).
func commandCalls(t *testing.T, c redis.Conn, cmd string) int64 {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// commandCount is the number of commands the server has run, those inside
// scripts included (INFO commandstats, INFO itself left out).
func commandCount(t *testing.T, c redis.Conn) int64 {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		i := strings.Index(line, "calls=")
		j := strings.IndexByte(line[i:], ',')
		n, _ := strconv.ParseInt(line[i+6:i+j], 10, 64)
		total += n
	}
	return total
}

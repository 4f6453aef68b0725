package rdb_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

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
// (between the test's start and the call: set while seeding), each with an
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

func newEnv(t *testing.T) *env {
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
func (e *env) now(t *testing.T) int64 {
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
	default:
		return false
	}
	g, err := strconv.ParseInt(got, 10, 64)
	return err == nil && lo > 0 && g >= lo+off && g <= hi+off
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
			if wv, ok := w[f]; ok && e.timeOK(v, wv) {
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
func (e *env) do(t *testing.T, cmd string, args ...any) any {
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
func (e *env) enqueueTo(t *testing.T, q rdb.QueueKeys, a *rdb.EnqueueArgs, ids ...string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i, id := range ids {
		ps[i] = []byte(payload(id))
	}
	if _, err := e.st.Enqueue(e.ctx, q, ids, ps, a); err != nil {
		t.Fatal(err)
	}
}

func (e *env) enqueue(t *testing.T, ids ...string) { t.Helper(); e.enqueueTo(t, e.q, nil, ids...) }

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

func (e *env) takeFrom(t *testing.T, q rdb.QueueKeys, w string, max int, stage bool) []rdb.Taken {
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
func (e *env) endIn(t *testing.T, q rdb.QueueKeys, retention int64, es ...rdb.Ending) []rdb.Ended {
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
func (e *env) endTask(t *testing.T, retention int64, end rdb.Ending) {
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
func (e *env) setCfg(t *testing.T, q rdb.QueueKeys, kv ...any) {
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

// active is the hash of a task worker w holds as taking pid.
func active(id, w, pid string) hash {
	return hash{"d": payload(id), "s": "active", "w": w, "p": pid}
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

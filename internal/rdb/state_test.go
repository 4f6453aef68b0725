package rdb_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The Redis values a state holds, by type. A state maps every key of a
// namespace to its value, so that comparing two states compares everything
// a script could have written.
type (
	list []string          // LRANGE 0 -1, in order
	set  []string          // SMEMBERS, sorted
	hash map[string]string // HGETALL
	str  string            // GET
)

type state map[string]any

func (s state) format(ns string) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		var v string
		switch x := s[k].(type) {
		case list:
			v = fmt.Sprintf("list %q", []string(x))
		case set:
			v = fmt.Sprintf("set %q", []string(x))
		case hash:
			v = fmt.Sprintf("hash %q", map[string]string(x)) // fmt sorts map keys
		case str:
			v = fmt.Sprintf("string %q", string(x))
		default:
			v = fmt.Sprintf("%T %v", x, x)
		}
		fmt.Fprintf(&b, "  %s = %s\n", strings.TrimPrefix(k, ns+":"), v)
	}
	if len(keys) == 0 {
		b.WriteString("  (no keys)\n")
	}
	return b.String()
}

// env is one test's private namespace on the shared server: a connection
// whose script calls are checked for hash-tag safety, and the keys of the
// stand-alone queue "q".
type env struct {
	ctx context.Context
	c   redis.Conn
	ns  string
	k   rdb.Keys
	q   rdb.QueueKeys
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
	return &env{ctx: ctx, c: c, ns: ns, k: k, q: k.Queue(rdb.Standalone("q"))}
}

// dump reads every key of the namespace, in two pipelined round trips.
func (e *env) dump(t *testing.T) state {
	t.Helper()
	keys, err := redistest.Keys(e.ctx, e.c, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	pipe := func(cmd func(k string) (string, []any)) []any {
		t.Helper()
		for _, k := range keys {
			name, args := cmd(k)
			if err := e.c.Send(name, args...); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.c.Flush(); err != nil {
			t.Fatal(err)
		}
		out := make([]any, len(keys))
		for i := range keys {
			if out[i], err = e.c.Receive(); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	types := pipe(func(k string) (string, []any) { return "TYPE", []any{k} })
	reads := map[string]string{"list": "LRANGE", "set": "SMEMBERS", "hash": "HGETALL", "string": "GET", "none": "EXISTS"}
	i := 0
	vals := pipe(func(k string) (string, []any) {
		typ, _ := redis.String(types[i], nil)
		i++
		switch reads[typ] {
		case "":
			t.Fatalf("key %s has unexpected type %s", k, typ)
		case "LRANGE":
			return "LRANGE", []any{k, 0, -1}
		}
		return reads[typ], []any{k}
	})
	st := state{}
	for i, k := range keys {
		typ, _ := redis.String(types[i], nil)
		var err error
		switch typ {
		case "list":
			var v []string
			v, err = redis.Strings(vals[i], nil)
			st[k] = list(v)
		case "set":
			var v []string
			v, err = redis.Strings(vals[i], nil)
			sort.Strings(v)
			st[k] = set(v)
		case "hash":
			var v map[string]string
			v, err = redis.StringMap(vals[i], nil)
			st[k] = hash(v)
		case "string":
			var v string
			v, err = redis.String(vals[i], nil)
			st[k] = str(v)
		} // "none": expired between SCAN and TYPE
		if err != nil {
			t.Fatalf("reading %s: %v", k, err)
		}
	}
	return st
}

// checkState compares the namespace with want, or with before when want is
// nil (the call must have changed nothing).
func (e *env) checkState(t *testing.T, before state, want func(e *env) state) {
	t.Helper()
	w := before
	if want != nil {
		w = want(e)
	}
	if got := e.dump(t); !reflect.DeepEqual(got, w) {
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

// Seeding helpers: they call the wrappers and fail the test on error.

func (e *env) enqueue(t *testing.T, ids ...string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i, id := range ids {
		ps[i] = []byte(payload(id))
	}
	if err := rdb.Enqueue(e.ctx, e.c, e.q, ids, ps); err != nil {
		t.Fatal(err)
	}
}

func (e *env) take(t *testing.T, w string, max int) {
	t.Helper()
	if _, err := rdb.Take(e.ctx, e.c, e.q, w, max); err != nil {
		t.Fatal(err)
	}
}

func (e *env) finish(t *testing.T, w, pid, id string) {
	t.Helper()
	if _, err := rdb.Finish(e.ctx, e.c, e.q, w, pid, id); err != nil {
		t.Fatal(err)
	}
}

func (e *env) giveBack(t *testing.T, w, pid, id string) {
	t.Helper()
	if _, err := rdb.GiveBack(e.ctx, e.c, e.q, w, pid, id); err != nil {
		t.Fatal(err)
	}
}

func (e *env) requeue(t *testing.T, crashed bool, ws ...string) {
	t.Helper()
	if _, _, err := rdb.Requeue(e.ctx, e.c, e.q, ws, crashed); err != nil {
		t.Fatal(err)
	}
}

func (e *env) cancel(t *testing.T, id string) {
	t.Helper()
	if _, err := rdb.Cancel(e.ctx, e.c, e.q, id); err != nil {
		t.Fatal(err)
	}
}

// Expected task hashes.

// fresh is the hash of a task that was enqueued and never taken.
func fresh(id string) hash { return hash{"d": payload(id)} }

// active is the hash of a task worker w holds as taking pid, attempt n.
func active(id, w, pid, n string) hash {
	return hash{"d": payload(id), "s": "active", "n": n, "w": w, "p": pid}
}

// queued is the hash of a task that was taken n times and put back; crashes
// is its 'c' field ("" for none).
func queued(id, n, crashes string) hash {
	h := hash{"d": payload(id), "s": "queued", "n": n}
	if crashes != "" {
		h["c"] = crashes
	}
	return h
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

// msg is one pub/sub message: Channel is "wake" or "cancel" for the queue's
// channels.
type msg struct{ Channel, Data string }

// listener is subscribed to the queue's wake and cancel channels.
type listener struct {
	psc      redis.PubSubConn
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
		names:    map[string]string{e.q.WakeChannel: "wake", e.q.CancelChannel: "cancel"},
		sentinel: e.ns + ":sentinel",
	}
	if err := l.psc.Subscribe(e.q.WakeChannel, e.q.CancelChannel, l.sentinel); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 3; {
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
				name = v.Channel
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

package goredis_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"

	"github.com/worqr/worqr-go/contrib/goredis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

func newPool(t *testing.T, opt *redis.Options) *goredis.Pool {
	t.Helper()
	p, err := goredis.NewPool(newClient(t, opt))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func getConn(t *testing.T, p rdb.ConnGetter) redigo.Conn {
	t.Helper()
	c, err := p.GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRepliesReadAsRedigoReadsThem(t *testing.T) {
	rp := srv.Pool()
	defer rp.Close()
	rc := rp.Get()
	defer rc.Close()
	gc := getConn(t, newPool(t, nil))
	// Each client writes keys of its own: kr (redigo) and k (the adapter).
	kr, k := redistest.Namespace()+":{t}:", redistest.Namespace()+":{t}:"
	for _, cmd := range [][]any{
		{"SET", k + "s", "v"},
		{"SET", k + "bin", []byte{0, 1, 255}},
		{"GET", k + "bin"},
		{"GET", k + "missing"},
		{"INCRBY", k + "n", 5},
		{"HSET", k + "h", "a", "1", "b", ""},
		{"HGETALL", k + "h"},
		{"HMGET", k + "h", "a", "nope", "b"},
		{"RPUSH", k + "l", "x", "y"},
		{"LRANGE", k + "l", 0, -1},
		{"ZADD", k + "z", 1.5, "m", 1700000000000, "n"},
		{"ZSCORE", k + "z", "n"},
		{"ZRANGE", k + "z", 0, -1, "WITHSCORES"},
		{"TYPE", k + "h"},
		{"PING"},
		{"EVAL", "return {1, 'two', {3, false}, redis.status_reply('OK'), redis.error_reply('ERR inside')}", 0},
		{"EVAL", "return redis.call('GET', KEYS[1])", 1, k + "missing"},
		{"SET", k + "big", strings.Repeat("x", 100_000)}, // more than a read buffer
		{"GET", k + "big"},
		{"SET", k + "empty", ""},
		{"GET", k + "empty"},
		{"INCRBY", k + "neg", -7},
		{"EVAL", "return {}", 0},
		{"EVAL", "return {1, {}, {2, {redis.error_reply('ERR deep'), 'x'}}}", 0},
		{"SCAN", 0, "MATCH", k + "*", "COUNT", 1000},
	} {
		name, args := cmd[0].(string), cmd[1:]
		rargs := make([]any, len(args))
		for i, a := range args {
			if s, ok := a.(string); ok {
				a = strings.Replace(s, k, kr, 1)
			}
			rargs[i] = a
		}
		want, wantErr := rc.Do(name, rargs...)
		got, gotErr := gc.Do(name, args...)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Errorf("%v: error %v, redigo's %v", cmd, gotErr, wantErr)
			continue
		}
		if name == "SCAN" { // the order of the keys is the server's
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v: %#v, redigo's %#v", cmd, got, want)
		}
	}
	t.Run("an error reply is a redis.Error", func(t *testing.T) {
		for _, cmd := range [][]any{
			{"HGET", k + "l", "a"},                  // WRONGTYPE
			{"EVALSHA", strings.Repeat("0", 40), 0}, // NOSCRIPT
			{"NOSUCHCOMMAND"},
		} {
			_, want := rc.Do(cmd[0].(string), cmd[1:]...) // reads only
			_, got := gc.Do(cmd[0].(string), cmd[1:]...)
			var re redigo.Error
			if !errors.As(got, &re) || got.Error() != want.Error() {
				t.Errorf("%v: %#v, redigo's %#v", cmd, got, want)
			}
		}
		if gc.Err() != nil {
			t.Errorf("an error reply broke the connection: %v", gc.Err())
		}
	})
}

func TestPipelines(t *testing.T) {
	k := redistest.Namespace() + ":{t}:"
	t.Run("Send, Flush and Receive keep the order", func(t *testing.T) {
		c := getConn(t, newPool(t, nil))
		for _, cmd := range [][]any{{"SET", k + "a", "1"}, {"INCR", k + "a"}, {"HGET", k + "a", "x"}} {
			if err := c.Send(cmd[0].(string), cmd[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := c.Send("GET", k+"a"); err != nil { // sent while replies wait
			t.Fatal(err)
		}
		r1, err1 := c.Receive()
		r2, err2 := c.Receive()
		_, err3 := c.Receive()
		r4, err4 := redigo.String(c.Receive())
		if r1 != "OK" || err1 != nil || r2 != int64(2) || err2 != nil {
			t.Errorf("replies %q %v, %v %v", r1, err1, r2, err2)
		}
		if !strings.HasPrefix(err3.Error(), "WRONGTYPE") {
			t.Errorf("third reply: %v, want WRONGTYPE", err3)
		}
		if r4 != "2" || err4 != nil {
			t.Errorf("the send after the flush: %q %v", r4, err4)
		}
	})
	t.Run("a window of sends goes out in one round trip", func(t *testing.T) {
		// As internal/rdb's batch enqueue and load do: keep window commands
		// sent, receive the oldest reply, send the next one.
		client, trips := newClient(t, nil), &roundTrips{}
		client.AddHook(trips)
		p, err := goredis.NewPool(client)
		if err != nil {
			t.Fatal(err)
		}
		c := getConn(t, p)
		const window, total = 4, 12
		sent, received := 0, 0
		receive := func() {
			t.Helper()
			n, err := redigo.Int(c.Receive())
			if received++; n != received || err != nil {
				t.Fatalf("reply %d: %d %v", received, n, err)
			}
		}
		for sent < total {
			if err := c.Send("INCR", k+"w"); err != nil {
				t.Fatal(err)
			}
			if sent++; sent-received < window {
				continue
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			receive()
		}
		for received < sent {
			receive()
		}
		if n := trips.n.Load(); n != total/window {
			t.Errorf("%d round trips for %d commands in windows of %d, want %d", n, total, window, total/window)
		}
	})
	t.Run("what was sent and not received when it closes is not sent", func(t *testing.T) {
		c := getConn(t, newPool(t, nil))
		if err := c.Send("SET", k+"dropped", "1"); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if r, err := getConn(t, newPool(t, nil)).Do("EXISTS", k+"dropped"); r != int64(0) || err != nil {
			t.Errorf("EXISTS: %v %v, want 0", r, err)
		}
	})
	t.Run("a pipeline returns an error reply in its slot", func(t *testing.T) {
		c := getConn(t, newPool(t, nil))
		p, ok := c.(rdb.Pipeliner)
		if !ok {
			t.Fatal("the connection is not an rdb.Pipeliner")
		}
		rs, err := p.Pipeline(context.Background(), []string{"SET", "HGET", "GET"},
			[][]any{{k + "p", "v"}, {k + "p", "f"}, {k + "p"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rs[1].(redigo.Error); !ok || string(rs[2].([]byte)) != "v" {
			t.Errorf("replies %#v", rs)
		}
	})
	t.Run("a transaction replies OK, QUEUED and EXEC's array", func(t *testing.T) {
		c := getConn(t, newPool(t, nil))
		for _, cmd := range [][]any{{"MULTI"}, {"SET", k + "m", "x"}, {"HSET", k + "m", "f", "v"}, {"GET", k + "m"}, {"EXEC"}} {
			if err := c.Send(cmd[0].(string), cmd[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		got, err := c.Do("")
		if err != nil {
			t.Fatal(err)
		}
		rs := got.([]any)
		exec := rs[4].([]any)
		if rs[0] != "OK" || rs[1] != "QUEUED" || len(exec) != 3 {
			t.Fatalf("replies %#v", rs)
		}
		if _, ok := exec[1].(redigo.Error); !ok || string(exec[2].([]byte)) != "x" {
			t.Errorf("EXEC's replies %#v", exec)
		}
	})
}

// TestACommandIsSentOnce loses the reply of an INCR pipelined before a
// BLPOP (the connection is killed while the BLPOP waits): go-redis alone
// sends both again on a new connection (MaxRetries), the adapter's
// connection fails and sends nothing more.
func TestACommandIsSentOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, nil)
	lose := func(t *testing.T, name string, run func(c *redis.Client, key string) error) int64 {
		t.Helper()
		key := redistest.Namespace() + ":{t}:n"
		c := newClient(t, &redis.Options{MaxRetries: 3, ClientName: name})
		done := make(chan error, 1)
		go func() { done <- run(c, key) }()
		var id int64
		redistest.WaitFor(t, 10*time.Second, "the BLPOP waits", func() bool {
			list, _ := admin.ClientList(ctx).Result()
			for _, l := range strings.Split(list, "\n") {
				if strings.Contains(l, "name="+name+" ") && strings.Contains(l, "cmd=blpop") {
					for _, kv := range strings.Fields(l) {
						if v, ok := strings.CutPrefix(kv, "id="); ok {
							id, _ = strconv.ParseInt(v, 10, 64)
						}
					}
					return true
				}
			}
			return false
		})
		if err := admin.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err == nil {
			t.Errorf("the call whose reply was lost returned no error")
		}
		n, _ := admin.Get(ctx, key).Int64()
		return n
	}
	t.Run("go-redis alone sends it again", func(t *testing.T) {
		n := lose(t, "plain", func(c *redis.Client, key string) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, key)
				p.BLPop(ctx, 3*time.Second, key+":none")
				return nil
			})
			return err
		})
		if n < 2 {
			t.Skipf("go-redis ran the INCR %d time(s): it did not send it again here", n)
		}
	})
	t.Run("the adapter sends it once", func(t *testing.T) {
		n := lose(t, "adapted", func(c *redis.Client, key string) error {
			p, err := goredis.NewPool(c)
			if err != nil {
				return err
			}
			conn, _ := p.GetContext(ctx)
			defer conn.Close()
			_, err = conn.(rdb.Pipeliner).Pipeline(ctx, []string{"INCR", "BLPOP"}, [][]any{{key}, {key + ":none", 3}})
			if err == nil && conn.Err() == nil {
				return nil
			}
			if _, err2 := conn.Do("INCR", key); err2 == nil {
				return errors.New("the connection served a command after it failed")
			}
			return err
		})
		if n != 1 {
			t.Errorf("the INCR ran %d times, want once", n)
		}
	})
}

func TestSubscription(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newPool(t, nil)
	ch := redistest.Namespace() + ":{t}:wake"
	st := rdb.NewStore(p, "unused")
	ready := make(chan struct{})
	got := make(chan string, 1)
	lctx, stop := context.WithCancel(ctx)
	listened := make(chan error, 1)
	go func() {
		listened <- st.Listen(lctx, []string{ch}, func() { close(ready) }, func(c string, data []byte) { got <- c + " " + string(data) })
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("the subscription was never confirmed")
	}
	if _, err := getConn(t, p).Do("PUBLISH", ch, "hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != ch+" hello" {
			t.Errorf("message %q", m)
		}
	case <-ctx.Done():
		t.Fatal("no message")
	}
	stop()
	if err := <-listened; err != nil {
		t.Errorf("Listen ended with %v, want nil when its context ends", err)
	}
	t.Run("ping and pong", func(t *testing.T) {
		psc := redigo.PubSubConn{Conn: getConn(t, p)}
		if err := psc.Subscribe(ch); err != nil {
			t.Fatal(err)
		}
		if s, ok := psc.ReceiveWithTimeout(5 * time.Second).(redigo.Subscription); !ok || s.Kind != "subscribe" || s.Count != 1 {
			t.Fatalf("subscription %#v", s)
		}
		if err := psc.Ping("x"); err != nil {
			t.Fatal(err)
		}
		if pong, ok := psc.ReceiveWithTimeout(5 * time.Second).(redigo.Pong); !ok || pong.Data != "x" {
			t.Errorf("pong %#v", pong)
		}
		if err := psc.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
		if s, ok := psc.ReceiveWithTimeout(5 * time.Second).(redigo.Subscription); !ok || s.Kind != "unsubscribe" || s.Count != 0 {
			t.Errorf("unsubscription %#v", s)
		}
	})
}

func TestNew(t *testing.T) {
	t.Run("refuses a client that speaks RESP3", func(t *testing.T) {
		_, err := goredis.New(newClient(t, &redis.Options{Protocol: 3}))
		if err == nil || !strings.Contains(err.Error(), "Protocol") {
			t.Errorf("New: %v, want an error naming Protocol", err)
		}
	})
	t.Run("refuses a ring", func(t *testing.T) {
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, Protocol: 2})
		defer r.Close()
		if _, err := goredis.New(r); err == nil {
			t.Error("New accepted a *redis.Ring")
		}
	})
	t.Run("a client is a Pool, a cluster client a Cluster", func(t *testing.T) {
		p, err := goredis.New(newClient(t, nil))
		if _, ok := p.(*goredis.Pool); !ok || err != nil {
			t.Errorf("New(*redis.Client) = %T, %v", p, err)
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, Protocol: 2})
		defer cc.Close()
		p, err = goredis.New(cc)
		if _, ok := p.(rdb.ShardedPubSub); !ok || err != nil {
			t.Errorf("New(*redis.ClusterClient) = %T (want an rdb.ShardedPubSub), %v", p, err)
		}
	})
}

// roundTrips is a go-redis hook that counts the commands and pipelines with
// an INCR a client (and the connections it lends) sends: their round trips
// (those of a new connection's handshake aside).
type roundTrips struct{ n atomic.Int64 }

func hasIncr(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), "INCR") {
			return true
		}
	}
	return false
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if hasIncr(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if hasIncr(cmds...) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestReadOnlyReplyDropsTheConnection: a READONLY reply (the node is a
// replica now, after a failover) makes the connection be closed rather
// than go back to go-redis's pool, as go-redis does when it reads one
// itself: a failover client then dials again, asking the sentinels for
// the primary.
func TestReadOnlyReplyDropsTheConnection(t *testing.T) {
	ctx := context.Background()
	replica, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	o, err := redis.ParseURL(replica.URL)
	if err != nil {
		t.Fatal(err)
	}
	o.Protocol = 2
	client := redis.NewClient(o)
	defer client.Close()
	// A replica of a primary nobody serves: it refuses writes.
	if err := client.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	p, err := goredis.NewPool(client)
	if err != nil {
		t.Fatal(err)
	}
	k := redistest.Namespace() + ":{t}:ro"
	t.Run("a read keeps it", func(t *testing.T) {
		c := getConn(t, p)
		if _, err := c.Do("GET", k); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if n := client.PoolStats().TotalConns; n != 1 {
			t.Errorf("%d connections in the pool, want 1", n)
		}
	})
	t.Run("READONLY drops it", func(t *testing.T) {
		c := getConn(t, p)
		_, err := c.Do("SET", k, "v")
		if err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
			t.Fatalf("SET on a replica: %v", err)
		}
		if n := client.PoolStats().TotalConns; n != 0 {
			t.Errorf("%d connections in the pool, want 0", n)
		}
		if _, err := c.Do("GET", k); err != nil { // on a new connection
			t.Errorf("the next command on the connection: %v", err)
		}
	})
}

package chaos_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

// endState says whether Redis holds task id (of queue) as ended, and its
// state. Retention keeps ended tasks readable.
func (c *cluster) endState(ctx context.Context, conn redis.Conn, queue, id string) (bool, string, error) {
	key := c.ns + ":{" + tagOf(queue) + "}:t:" + id
	v, err := redis.Strings(redis.DoContext(conn, ctx, "HMGET", key, "s", "fs"))
	if err != nil {
		return false, "", err
	}
	s, fs := v[0], v[1]
	switch {
	case fs == "done" || fs == "failed" || fs == "cancelled":
		return true, "run " + fs, nil
	case s == "done" || s == "dead" || s == "cancelled":
		return true, s, nil
	case s == "" && fs == "":
		return false, "missing", nil
	}
	return false, s, nil
}

// redisEnded splits ids into those Redis holds as ended and the rest.
func (c *cluster) redisEnded(ids map[string]string) (ended map[string]string, open map[string]string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	ended, open = map[string]string{}, map[string]string{}
	var goneChildren []string
	for id, q := range ids {
		ok, st, err := c.endState(ctx, conn, q, id)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case ok:
			ended[id] = st
		case st == "missing" && isChildQueue(q):
			goneChildren = append(goneChildren, id)
		default:
			open[id] = st
		}
	}
	if len(goneChildren) > 0 {
		// The flow's child queues keep nothing once a child ends: its run
		// records how it ended (k:<child id>).
		kids, err := c.childOutcomes(ctx, conn)
		if err != nil {
			return nil, nil, err
		}
		for _, id := range goneChildren {
			if st, ok := kids[id]; ok && st != "pending" {
				ended[id] = "child " + st + " (in its run)"
			} else {
				open[id] = "missing"
			}
		}
	}
	return ended, open, nil
}

// childOutcomes reads every started run's hash and returns how each of its
// children stands (k:<child id> fields).
func (c *cluster) childOutcomes(ctx context.Context, conn redis.Conn) (map[string]string, error) {
	c.led.mu.Lock()
	var runs []string
	for id, t := range c.led.tasks {
		if t.acked && isFlowQueue(t.queue) {
			runs = append(runs, id)
		}
	}
	c.led.mu.Unlock()
	out := map[string]string{}
	for _, id := range runs {
		m, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", c.ns+":{"+flowName+"}:t:"+id))
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			if cid, ok := strings.CutPrefix(k, "k:"); ok {
				out[cid] = v
			}
		}
	}
	return out, nil
}

// waitDrained waits until every task that must end has ended (a final line,
// or Redis says so), for up to d, or until nothing more ended for stall. It
// returns the ids still open.
func (c *cluster) waitDrained(d, stall time.Duration) map[string]string {
	deadline := time.Now().Add(d)
	best, since := -1, time.Now()
	for {
		un := c.led.unended()
		open := un
		if len(un) <= 20000 {
			_, o, err := c.redisEnded(un)
			if err == nil {
				open = o
			}
		}
		if best < 0 || len(open) < best {
			best, since = len(open), time.Now()
		}
		if len(open) == 0 || time.Now().After(deadline) || time.Since(since) > stall {
			return open
		}
		// Look again in half a second: Redis is asked each time (an end
		// with no line is in Redis only), so not at every line.
		if redistest.Pause(c.ctx, 500*time.Millisecond) != nil {
			return open
		}
	}
}

// leftovers scans the namespace for keys that must be gone once a run has
// drained: waiting lists, scheduled sets, processing lists and worker-queue
// sets. It also returns the other keys worth a look (holder indexes, the
// worker registry), which are reported but not failed on.
func (c *cluster) leftovers() (bad, notes []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	keys, err := redistest.Keys(ctx, conn, c.ns)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(keys)
	for _, k := range keys {
		kind := keyKind(c.ns, k)
		switch kind {
		case "q", "s", "p", "wq":
			desc := k
			switch kind {
			case "q", "p":
				ids, _ := redis.Strings(redis.DoContext(conn, ctx, "LRANGE", k, 0, 4))
				n, _ := redis.Int(redis.DoContext(conn, ctx, "LLEN", k))
				desc = fmt.Sprintf("%s (list of %d: %v)", k, n, ids)
			case "s":
				ids, _ := redis.Strings(redis.DoContext(conn, ctx, "ZRANGE", k, 0, 4))
				n, _ := redis.Int(redis.DoContext(conn, ctx, "ZCARD", k))
				desc = fmt.Sprintf("%s (zset of %d: %v)", k, n, ids)
			case "wq":
				pids, _ := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", k))
				desc = fmt.Sprintf("%s (pids %v)", k, pids)
			}
			bad = append(bad, desc)
		case "h":
			m, _ := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", k))
			notes = append(notes, fmt.Sprintf("%s holds %v", k, m))
		case "workers":
			m, _ := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", k))
			notes = append(notes, fmt.Sprintf("%s holds %d ids", k, len(m)))
		}
	}
	return bad, notes, nil
}

// keyKind returns the kind segment of a key: "q" for <ns>:{T}:q:..., and
// "workers" for <ns>:{reg}:workers.
func keyKind(ns, key string) string {
	rest, ok := strings.CutPrefix(key, ns+":")
	if !ok {
		return ""
	}
	if i := strings.IndexByte(rest, '}'); i >= 0 && strings.HasPrefix(rest, "{") {
		rest = strings.TrimPrefix(rest[i+1:], ":")
	}
	kind, _, _ := strings.Cut(rest, ":")
	return kind
}

// evidence describes an open task: its Redis state, who holds its taking,
// and what the workers printed about it.
func (c *cluster) evidence(id, queue string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	tag := tagOf(queue)
	base := c.ns + ":{" + tag + "}:"
	h, _ := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", base+"t:"+id))
	delete(h, "d")
	var b strings.Builder
	fmt.Fprintf(&b, "task %s (queue %s): hash %v", id, queue, h)
	if st := h["st"]; st != "" {
		queue = st // a flow run: its current stage
	}
	if pid := h["p"]; pid != "" {
		w := h["w"]
		in, _ := redis.Int(redis.DoContext(conn, ctx, "SISMEMBER", base+"wq:"+queue+":"+w, pid))
		alive, _ := redis.Int(redis.DoContext(conn, ctx, "EXISTS", c.ns+":{reg}:w:"+w))
		holder, _ := redis.Int(redis.DoContext(conn, ctx, "SISMEMBER", base+"h:"+queue, w))
		proc, _ := redis.Strings(redis.DoContext(conn, ctx, "LRANGE", base+"p:"+pid, 0, -1))
		fmt.Fprintf(&b, "; pid %s in wq of %s: %d; p:%s = %v; keepalive of %s exists: %d; in holder index: %d",
			pid, w, in, pid, proc, w, alive, holder)
		fmt.Fprintf(&b, "; worker process of %s: %s", w, c.procOfWorker(w))
	}
	if pos, err := redis.Int(redis.DoContext(conn, ctx, "LPOS", base+"q:"+queue, id)); err == nil {
		fmt.Fprintf(&b, "; waiting at position %d", pos)
	}
	c.led.mu.Lock()
	if t := c.led.tasks[id]; t != nil {
		fmt.Fprintf(&b, "; acked %v; takes:", t.acked)
		for _, tk := range t.takes {
			fmt.Fprintf(&b, " [worker %d %s pid %s attempt %d]", tk.proc, tk.queue, tk.pid, tk.attempt)
		}
		fmt.Fprintf(&b, "; retries %v, lost lines %d, end lines %d", t.retries, t.losts, len(t.ends))
	}
	c.led.mu.Unlock()
	return b.String()
}

// procOfWorker names the process that registered worker id w, and whether
// it is alive.
func (c *cluster) procOfWorker(w string) string {
	c.led.mu.Lock()
	n := 0
	for pn, p := range c.led.procs {
		for _, id := range p.ids {
			if id == w {
				n = pn
			}
		}
	}
	c.led.mu.Unlock()
	if n == 0 {
		return "unknown (no registered line)"
	}
	c.mu.Lock()
	p := c.procs[n]
	c.mu.Unlock()
	state := "alive"
	switch {
	case p == nil:
		state = "gone"
	case !p.alive():
		state = "exited"
	case p.frozen.Load():
		state = "frozen"
	}
	return fmt.Sprintf("worker %d (%s)", n, state)
}

// faultCounts returns a copy of the faults injected so far.
func (c *cluster) faultCounts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.faults))
	for k, v := range c.faults {
		out[k] = v
	}
	return out
}

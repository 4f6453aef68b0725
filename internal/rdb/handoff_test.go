package rdb_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// parkW parks worker w on e.q (a take with Park that finds the queue empty)
// with deadline until and cap slots.
func (e *env) parkW(t *testing.T, w string, until int64, slots int) {
	t.Helper()
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: until, Max: slots, Park: slots})
	if err != nil || len(got) != 0 {
		t.Fatalf("park take: %v %v", got, err)
	}
}

func (e *env) parked(t *testing.T) map[string]string {
	t.Helper()
	m, err := redis.StringMap(e.c.Do("HGETALL", e.q.Park))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A take that finds the queue empty parks its worker (and indexes it as a
// holder); a take with tasks to spare does not; a paused queue parks no
// one.
func TestTakeParks(t *testing.T) {
	e := newEnv(t)
	until := e.now(t) + 60_000
	e.enqueue(t, "a", "b")
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: until, Max: 2, Park: 2})
	if err != nil || len(got) != 2 {
		t.Fatal(got, err)
	}
	if p := e.parked(t); len(p) != 0 {
		t.Fatalf("a take that filled its slots parked: %v", p)
	}
	got, err = e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: until, Max: 2, Park: 2})
	if err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	if p := e.parked(t); p["W"] != strconv.FormatInt(until, 10)+"|2" {
		t.Fatalf("parked %v, want W -> %d|2", p, until)
	}
	if n, _ := redis.Int(e.c.Do("SISMEMBER", e.q.Holders, "W")); n != 1 {
		t.Fatal("a parked worker is not in the holder index")
	}
	// With ParkMs the entry is valid that long from the take, when that
	// comes before the deadline.
	t0 := e.now(t)
	got, err = e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: until, Max: 2, Park: 2, ParkMs: 50})
	if err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	v := strings.Split(e.parked(t)["W"], "|")
	if at, _ := strconv.ParseInt(v[0], 10, 64); len(v) != 2 || at < t0+50 || at > e.now(t)+50 || v[1] != "2" {
		t.Fatalf("parked W -> %v, want about %d|2", v, t0+50)
	}
	// An end that takes again and finds the queue empty parks as well.
	_, _, err = e.st.EndTake(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "V", "0", "x", nil)},
		&rdb.TakeArgs{Worker: "V", Until: until, Max: 1, Park: 3})
	if err != nil {
		t.Fatal(err)
	}
	if p := e.parked(t); p["V"] != strconv.FormatInt(until, 10)+"|3" {
		t.Fatalf("parked %v, want V -> %d|3", p, until)
	}
	// Each flag that a hand-off would pass (a pause, a limit, a priority
	// level in use) removes every parked worker when it is set, and no
	// take parks while it holds; lifting it lets takes park again.
	for _, f := range []struct {
		name     string
		set, off func() error
	}{
		{"a pause", func() error { return e.st.SetPaused(e.ctx, e.q, true) },
			func() error { return e.st.SetPaused(e.ctx, e.q, false) }},
		{"a limit", func() error { return e.st.SetLimits(e.ctx, e.q, rdb.Limits{Conc: 3}) },
			func() error { return e.st.SetLimits(e.ctx, e.q, rdb.Limits{}) }},
		{"a priority level", func() error { _, err := e.st.MarkLevel(e.ctx, e.q, 2); return err }, nil},
	} {
		e.parkW(t, "W", until, 2)
		if p := e.parked(t); len(p) == 0 {
			t.Fatalf("before %s: nobody parked", f.name)
		}
		if err := f.set(); err != nil {
			t.Fatal(err)
		}
		if p := e.parked(t); len(p) != 0 {
			t.Fatalf("parked after %s was set: %v", f.name, p)
		}
		e.parkW(t, "W", until, 2)
		if p := e.parked(t); len(p) != 0 {
			t.Fatalf("parked while %s holds: %v", f.name, p)
		}
		if f.off != nil {
			if err := f.off(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An enqueue hands its task to a parked worker with a free slot: the taking
// is recorded as a take records it, the message carries what the worker
// needs, and nothing waits in the queue.
func TestEnqueueHandsOff(t *testing.T) {
	e := newEnv(t)
	until := e.now(t) + 60_000
	e.parkW(t, "W", until, 2)
	l := e.listen(t)
	if _, err := e.st.Enqueue(e.ctx, e.q, []string{"a"}, [][]byte{[]byte("pa\nyload")},
		&rdb.EnqueueArgs{MaxAttempts: 4, TimeoutMs: 1500}); err != nil {
		t.Fatal(err)
	}
	msgs := l.collect(t, e)
	if len(msgs) != 1 || msgs[0].Channel != "wake" {
		t.Fatalf("published %v, want one hand-off on the wake channel", msgs)
	}
	h, ok := rdb.ParseHandoff([]byte(msgs[0].Data))
	if !ok {
		t.Fatalf("not a hand-off: %q", msgs[0].Data)
	}
	want := rdb.Taken{ID: "a", PID: h.Taken.PID, Payload: []byte("pa\nyload"), Attempt: 1, MaxAttempts: 4, TimeoutMs: 1500}
	if h.Worker != "W" || h.Taken.PID == "" || string(h.Taken.Payload) != string(want.Payload) ||
		h.Taken.ID != want.ID || h.Taken.Attempt != 1 || h.Taken.MaxAttempts != 4 || h.Taken.TimeoutMs != 1500 {
		t.Fatalf("hand-off %+v, want worker W and %+v", h, want)
	}
	if n, _ := redis.Int(e.c.Do("LLEN", e.q.Waiting)); n != 0 {
		t.Fatalf("%d ids wait after a hand-off", n)
	}
	task, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task("a")))
	if task["s"] != "active" || task["w"] != "W" || task["p"] != h.Taken.PID || task["ma"] != "4" || task["to"] != "1500" {
		t.Fatalf("task hash %v", task)
	}
	if id, _ := redis.String(e.c.Do("HGET", e.q.WorkerQueue("W"), h.Taken.PID)); id != "a" {
		t.Fatalf("holdings of W: pid %s -> %q, want a", h.Taken.PID, id)
	}
	// The taking ends as a taken one does.
	if ended := e.endIn(t, e.q, 0, rdb.Done(rdb.KindTask, "W", h.Taken.PID, "a", nil)); ended[0].Outcome != rdb.OutcomeDone {
		t.Fatalf("end of a handed taking: %+v", ended)
	}

	// A worker holding its cap is not handed more, and is parked no
	// more; the task waits with a wake-up.
	e.parkW(t, "W", until, 1)
	e.enqueue(t, "b")
	msgs = l.collect(t, e)
	if len(msgs) != 1 {
		t.Fatalf("published %v", msgs)
	}
	hb, _ := rdb.ParseHandoff([]byte(msgs[0].Data))
	e.enqueue(t, "c")
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
	if p := e.parked(t); len(p) != 0 {
		t.Fatalf("a full worker is still parked: %v", p)
	}
	if ids, _ := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1)); strings.Join(ids, ",") != "c" {
		t.Fatalf("waiting %v, want c", ids)
	}
	e.finish(t, "W", hb.Taken.PID, "b")

	// A task waiting (here c) is never overtaken: W, parked with a free
	// slot, is handed nothing, and the new task waits behind it.
	e.do(t, "DEL", e.q.Waiting)
	e.parkW(t, "W", until, 1)
	e.do(t, "RPUSH", e.q.Waiting, "c") // as a give back or the mover would
	e.enqueue(t, "c2")
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
	if ids := e.waitingIDs(t); strings.Join(ids, ",") != "c,c2" {
		t.Fatalf("waiting %v, want c,c2", ids)
	}
	if n, _ := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); n != 0 {
		t.Fatalf("W was handed a task while one waited")
	}
	e.do(t, "DEL", e.q.Waiting, e.q.Park)

	// A worker past its deadline (dead, or frozen) is skipped and
	// forgotten.
	now := e.now(t)
	if _, err := e.c.Do("HSET", e.q.Park, "Z", strconv.FormatInt(now-1, 10)+"|5"); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, "d")
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
	if p := e.parked(t); len(p) != 0 {
		t.Fatalf("a worker past its deadline is still parked: %v", p)
	}
}

// One enqueue of several tasks (a batch, or concurrent plain enqueues
// grouped into one call) hands as many as the parked workers have free
// slots, in the tasks' order with increasing pids, one message each; the
// rest wait in the queue, in order, with one wake-up.
func TestEnqueueBatchHandsOff(t *testing.T) {
	e := newEnv(t)
	until := e.now(t) + 60_000
	e.parkW(t, "W", until, 2)
	e.parkW(t, "V", until, 1)
	// Z is past its deadline: skipped and forgotten, the others served.
	e.do(t, "HSET", e.q.Park, "Z", strconv.FormatInt(e.now(t)-1, 10)+"|5")
	l := e.listen(t)
	ids := []string{"a", "b", "c", "d", "e"}
	ps := make([][]byte, len(ids))
	for i, id := range ids {
		ps[i] = []byte(payload(id))
	}
	if _, err := e.st.Enqueue(e.ctx, e.q, ids, ps, &rdb.EnqueueArgs{MaxAttempts: 3, TimeoutMs: 700, RetentionMs: 9000}); err != nil {
		t.Fatal(err)
	}
	msgs := l.collect(t, e)
	if len(msgs) != 4 || msgs[3].Data != "2" {
		t.Fatalf("published %v, want 3 hand-offs and a wake-up for 2", msgs)
	}
	count := map[string]int{}
	lastPID := 0
	for i, m := range msgs[:3] {
		h, ok := rdb.ParseHandoff([]byte(m.Data))
		if !ok {
			t.Fatalf("not a hand-off: %q", m.Data)
		}
		want := ids[i]
		pid, _ := strconv.Atoi(h.Taken.PID)
		if h.Taken.ID != want || string(h.Taken.Payload) != payload(want) || pid <= lastPID ||
			h.Taken.MaxAttempts != 3 || h.Taken.TimeoutMs != 700 {
			t.Fatalf("hand-off %d: %+v, want task %s after pid %d, max attempts 3, timeout 700", i, h, want, lastPID)
		}
		lastPID = pid
		if id, _ := redis.String(e.c.Do("HGET", e.q.WorkerQueue(h.Worker), h.Taken.PID)); id != want {
			t.Fatalf("holdings of %s: pid %s -> %q, want %s", h.Worker, h.Taken.PID, id, want)
		}
		task, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task(want)))
		if task["s"] != "active" || task["w"] != h.Worker || task["p"] != h.Taken.PID || task["d"] != payload(want) ||
			task["ma"] != "3" || task["to"] != "700" || task["rt"] != "9000" {
			t.Fatalf("task hash of %s: %v (hand-off to %s, pid %s)", want, task, h.Worker, h.Taken.PID)
		}
		count[h.Worker]++
	}
	if count["W"] != 2 || count["V"] != 1 {
		t.Fatalf("handed %v, want 2 to W and 1 to V (their free slots)", count)
	}
	if ids := e.waitingIDs(t); strings.Join(ids, ",") != "d,e" {
		t.Fatalf("waiting %v, want d,e", ids)
	}
	for _, id := range []string{"d", "e"} {
		task, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task(id)))
		if task["s"] != "" || task["w"] != "" || task["d"] != payload(id) || task["ma"] != "3" || task["to"] != "700" || task["rt"] != "9000" {
			t.Fatalf("task hash of waiting %s: %v", id, task)
		}
	}
	if p := e.parked(t); p["Z"] != "" {
		t.Fatalf("a worker past its deadline is still parked: %v", p)
	}
	// d and e wait: the next enqueue hands nothing, and waits behind them.
	e.enqueue(t, "f")
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
	if ids := e.waitingIDs(t); strings.Join(ids, ",") != "d,e,f" {
		t.Fatalf("waiting %v, want d,e,f", ids)
	}
	// Nothing waits, and both are full: the next enqueue unparks them.
	e.do(t, "DEL", e.q.Waiting)
	e.enqueue(t, "g", "h")
	checkPubs(t, l.collect(t, e), []msg{{"wake", "2"}})
	if p := e.parked(t); len(p) != 0 {
		t.Fatalf("full workers are still parked: %v", p)
	}
}

// One call hands at most 64 tasks and 64 KiB of payload (every process
// subscribed to the queue receives each message); the rest wait.
func TestEnqueueBatchHandsOffWithinLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n, len int
		handed int
	}{
		{"count", 100, 10, 64},
		{"bytes", 40, 3000, 21}, // 21 x 3,000 B fit in 65,536, 22 do not
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.parkW(t, "W", e.now(t)+60_000, 1000)
			ids := make([]string, tc.n)
			ps := make([][]byte, tc.n)
			for i := range ids {
				ids[i] = "t" + strconv.Itoa(i)
				ps[i] = make([]byte, tc.len)
			}
			if _, err := e.st.Enqueue(e.ctx, e.q, ids, ps, nil); err != nil {
				t.Fatal(err)
			}
			if n, _ := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); n != tc.handed {
				t.Fatalf("handed %d, want %d", n, tc.handed)
			}
			if w := e.waitingIDs(t); len(w) != tc.n-tc.handed || w[0] != ids[tc.handed] {
				t.Fatalf("%d waiting from %v, want %d from %s", len(w), w[:1], tc.n-tc.handed, ids[tc.handed])
			}
		})
	}
}

// Pids are written in full however large the tag's counter grows (Lua's
// tostring keeps 14 significant digits: 1e+14 would name many takings),
// by a hand-off and by a take alike.
func TestLargePids(t *testing.T) {
	e := newEnv(t)
	const base = 99_999_999_999_995
	e.do(t, "SET", e.q.Seq, base)
	e.parkW(t, "W", e.now(t)+60_000, 8)
	e.enqueue(t, "a", "b", "c", "d", "e", "f", "g", "h")
	held, err := redis.StringMap(e.c.Do("HGETALL", e.q.WorkerQueue("W")))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if pid := strconv.Itoa(base + 1 + i); held[pid] != id {
			t.Fatalf("hand-off: holdings %v, want pid %s -> %s", held, pid, id)
		}
	}
	e.do(t, "SET", e.q.Seq, base+4)
	e.enqueue(t, "x", "y") // W is full: they wait
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "V", Until: e.now(t) + 60_000, Max: 2})
	if err != nil || len(got) != 2 || got[0].PID != strconv.Itoa(base+5) || got[1].PID != strconv.Itoa(base+6) {
		t.Fatalf("take: %+v %v, want pids %d and %d", got, err, base+5, base+6)
	}
}

// Only a task due now, at level 0, with no unique key, no id of the
// caller's and no deadline is handed; the others are enqueued as before.
func TestEnqueueHandsOffOnlyPlainTasks(t *testing.T) {
	e := newEnv(t)
	until := e.now(t) + 60_000
	for i, a := range []*rdb.EnqueueArgs{
		{DelayMillis: 60_000},
		{UniqueKey: "k", UniqueTTL: 60_000},
		{DeadlineMs: until},
		{IDLockTTL: 60_000, Digest: "d"},
	} {
		e.parkW(t, "W", until, 4)
		id := "t" + strconv.Itoa(i)
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{id}, [][]byte{[]byte("p")}, a); err != nil {
			t.Fatal(err)
		}
		if n, _ := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); n != 0 {
			t.Fatalf("%+v: handed", a)
		}
		e.do(t, "DEL", e.q.Waiting) // the next park must find the queue empty
	}
	big := make([]byte, rdb.MaxHandoffPayload+1)
	if _, err := e.st.Enqueue(e.ctx, e.q, []string{"big"}, [][]byte{big}, nil); err != nil {
		t.Fatal(err)
	}
	if n, _ := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); n != 0 {
		t.Fatal("a payload over MaxHandoffPayload was handed")
	}
}

// A release tells the tag's taking counter, so that a worker can tell a
// hand-off the release put back (pid at most Seq) from a later one. A
// requeue of a worker (stop, or death) unparks it.
func TestReleaseSeqAndRequeueUnparks(t *testing.T) {
	e := newEnv(t)
	until := e.now(t) + 60_000
	e.parkW(t, "W", until, 2)
	l := e.listen(t)
	e.enqueue(t, "a")
	h, _ := rdb.ParseHandoff([]byte(l.collect(t, e)[0].Data))
	r, err := e.st.ReleaseCheck(e.ctx, e.q, "W", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requeued != 1 || r.Seq != h.Seq {
		t.Fatalf("release %+v, want 1 requeued and seq %d", r, h.Seq)
	}
	if p := e.parked(t); p["W"] == "" {
		t.Fatal("a release unparked the worker")
	}
	e.requeue(t, false, "W")
	if p := e.parked(t); len(p) != 0 {
		t.Fatalf("a requeued worker is still parked: %v", p)
	}
}

func TestParseHandoff(t *testing.T) {
	for _, bad := range []string{"", "1", "0", "h", "h\n", "h\nW\n1\na\n\n", "h\nW\nx\na\n\n\np", "h\n\n1\na\n\n\np", "h\nW\n1\na\nx\n\np"} {
		if _, ok := rdb.ParseHandoff([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	h, ok := rdb.ParseHandoff([]byte("h\nW\n12\nid\n\n\n"))
	if !ok || h.Worker != "W" || h.Seq != 12 || h.Taken.PID != "12" || h.Taken.ID != "id" || len(h.Taken.Payload) != 0 {
		t.Fatalf("%+v %v", h, ok)
	}
	if rdb.IsHandoff([]byte("12")) {
		t.Fatal("a wake-up is a hand-off")
	}
	for _, c := range []struct {
		msg, w string
		want   bool
	}{{"h\nW\n12\nid\n\n\n", "W", true}, {"h\nWX\n12\nid\n\n\n", "W", false},
		{"h\nW\n12\nid\n\n\n", "WX", false}, {"h\nW", "W", false}, {"12", "W", false}} {
		if got := rdb.HandoffFor([]byte(c.msg), c.w); got != c.want {
			t.Errorf("HandoffFor(%q, %q) = %v", c.msg, c.w, got)
		}
	}
}

// A worker whose first take of a queue finds it empty parks, and an enqueue
// then hands it a task: the worker never took anything itself, so the park
// is what must put it in the queue's holder index (park.lua). Otherwise the
// handed taking sits in a worker-queue hash no sweep of the holder index
// reaches: lost for good if the worker dies before its registration names
// the queue (DESIGN: every pid in any wq set is reachable by the reaper).
func TestParkOfAFreshWorkerIndexesItAsAHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	until := e.now(t) + 60_000
	e.parkW(t, "P", until, 1)
	if n, _ := redis.Int(e.c.Do("SISMEMBER", e.q.Holders, "P")); n != 1 {
		t.Fatal("a worker parked on its first take is not in the holder index")
	}
	e.enqueue(t, "a")
	held, err := redis.StringMap(e.c.Do("HGETALL", e.q.WorkerQueue("P")))
	if err != nil || len(held) != 1 {
		t.Fatalf("P's holdings after the hand-off: %v, %v; want one taking", held, err)
	}
	hs, err := e.st.Holders(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || len(hs[0]) != 1 || hs[0][0] != "P" {
		t.Fatalf("holder index %v, want [[P]]: the handed taking must be reachable", hs)
	}
}

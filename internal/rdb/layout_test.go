package rdb_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// The per-call layouts of the take and end scripts (internal/rdb/layout.go)
// round-trip: what Go encodes through a declaration, Lua reads back by the
// same names on a real Redis, and what Lua lays out by name, Go decodes.

// evalLua runs body on the package's Redis as load would build it (its
// includes and the layouts it reads first), with args as ARGV.
func evalLua(t *testing.T, body string, args ...any) any {
	t.Helper()
	src, err := rdb.AssembleLua(body)
	if err != nil {
		t.Fatal(err)
	}
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	c := pool.Get()
	defer c.Close()
	r, err := c.Do("EVAL", append([]any{src, 0}, args...)...)
	if err != nil {
		t.Fatalf("EVAL: %v\n%s", err, body)
	}
	return r
}

// namedLua returns, as name, value pairs, the fields of layout L found at
// ARGV[base + offset] (false when missing), each name after prefix.
const namedLua = `
local out = {}
local function named(prefix, L, base)
  for f, i in pairs(L) do
    if f ~= 'N' then
      out[#out + 1] = prefix .. f
      out[#out + 1] = ARGV[base + i] or false
    end
  end
end
`

// pairsMap reads name, value pairs (nil values as "<nil>").
func pairsMap(t *testing.T, r any) map[string]string {
	t.Helper()
	vs, err := redis.Values(r, nil)
	if err != nil || len(vs)%2 != 0 {
		t.Fatalf("reply %v: %v", r, err)
	}
	out := map[string]string{}
	for i := 0; i < len(vs); i += 2 {
		k, _ := redis.String(vs[i], nil)
		v, err := redis.String(vs[i+1], nil)
		if err != nil {
			v = "<nil>"
		}
		out[k] = v
	}
	return out
}

func diffMaps(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("%s: Lua read no %s (want %q)", what, k, w)
		case !wok:
			t.Errorf("%s: Lua read %s = %q, not expected", what, k, g)
		case g != w:
			t.Errorf("%s: Lua read %s = %q, want %q", what, k, g, w)
		}
	}
}

// The generated Lua of each layout holds every field of its Go
// declaration, at its 1-based position, and its width N: nothing else.
func TestLayoutPrelude(t *testing.T) {
	t.Parallel()
	names := rdb.LayoutNames()
	if len(names) == 0 {
		t.Fatal("no layouts: the test reads the wrong declarations")
	}
	for _, name := range names {
		r := evalLua(t, fmt.Sprintf(`local L, out = LAYOUT.%s, {}
for f, i in pairs(L) do
  out[#out + 1] = f
  out[#out + 1] = tostring(i)
end
return out
`, name))
		want := map[string]string{}
		fields := rdb.LayoutFields(name)
		for i, f := range fields {
			want[f] = fmt.Sprint(i + 1)
		}
		want["N"] = fmt.Sprint(len(fields))
		diffMaps(t, "LAYOUT."+name, pairsMap(t, r), want)
	}
}

// takeFields are what Lua should read of a take's own fields (takeFields
// in take.go), as strings.
func takeFields(worker, max, deadline, maxCrashes, kind, safe, levels, limited, batch, park, parkMs string) map[string]string {
	return map[string]string{"worker": worker, "max": max, "deadline": deadline, "max_crashes": maxCrashes,
		"kind": kind, "safe": safe, "levels": levels, "limited": limited, "batch": batch, "park": park,
		"park_ms": parkMs, "fair": "0"}
}

// fairTake is takeFields of a fair queue's take.
func fairTake(m map[string]string) map[string]string {
	return merged(m, map[string]string{"fair": "1"})
}

func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func prefixFields(q rdb.QueueKeys, prefix string) map[string]string {
	return map[string]string{prefix + "task_prefix": q.TaskPrefix, prefix + "queue_prefix": q.QueuePrefix,
		prefix + "wake_prefix": q.WakePrefix, prefix + "sched_prefix": q.ScheduledPrefix,
		prefix + "cancel_prefix": q.CancelPrefix, prefix + "index_prefix": q.IndexPrefix}
}

// The take's arguments (TAKE), the flags of the old mode string among
// them, as TakeWait sends them.
func TestLayoutRoundTripTake(t *testing.T) {
	t.Parallel()
	q := rdb.NewKeys("lt").Queue(rdb.Standalone("q"))
	for _, c := range []struct {
		name string
		a    rdb.TakeArgs
		safe bool
		want map[string]string
	}{
		{"plain", rdb.TakeArgs{Worker: "w1", Until: 1700000000123, Max: 7, MaxCrashes: 3}, false,
			takeFields("w1", "7", "1700000000123", "3", "task", "0", "0", "0", "0", "0", "0")},
		{"every flag, bounded; a take that cannot park does not", rdb.TakeArgs{Worker: "w2", Until: 5, Max: 5000,
			Levels: 12, Limited: true, Batch: 5000, Park: 4, ParkMs: 250}, true,
			takeFields("w2", "1000", "5", "0", "task", "1", "9", "1", "1000", "0", "0")},
		{"parks", rdb.TakeArgs{Worker: "w3", Until: 9, Max: 1, Park: 4, ParkMs: 250}, false,
			takeFields("w3", "1", "9", "0", "task", "0", "0", "0", "0", "4", "250")},
		{"parks, negative validity", rdb.TakeArgs{Worker: "w3", Until: 9, Max: 1, Park: 2, ParkMs: -5}, false,
			takeFields("w3", "1", "9", "0", "task", "0", "0", "0", "0", "2", "0")},
		{"batch of one is no batch", rdb.TakeArgs{Worker: "w", Until: 1, Max: 1, Batch: 1}, false,
			takeFields("w", "1", "1", "0", "task", "0", "0", "0", "0", "0", "0")},
		{"stage: no batches, no parking", rdb.TakeArgs{Worker: "w", Until: 1, Max: 2, Stage: true, Batch: 5, Park: 3},
			true, takeFields("w", "2", "1", "0", "stage", "1", "0", "0", "0", "0", "0")},
		{"child, levels", rdb.TakeArgs{Worker: "w", Until: 1, Max: 2, Child: true, Levels: 2, Limited: true}, false,
			takeFields("w", "2", "1", "0", "child", "0", "2", "1", "0", "0", "0")},
		{"stage wins over child", rdb.TakeArgs{Worker: "w", Until: 1, Max: 2, Stage: true, Child: true}, false,
			takeFields("w", "2", "1", "0", "stage", "0", "0", "0", "0", "0", "0")},
		{"fair: no parking", rdb.TakeArgs{Worker: "w", Until: 1, Max: 2, Fair: true, Park: 3}, false,
			fairTake(takeFields("w", "2", "1", "0", "task", "0", "0", "0", "0", "0", "0"))},
		{"a stage is never fair", rdb.TakeArgs{Worker: "w", Until: 1, Max: 2, Stage: true, Fair: true}, false,
			takeFields("w", "2", "1", "0", "stage", "0", "0", "0", "0", "0", "0")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := rdb.TakeArgv(q, c.a, c.safe)
			r := evalLua(t, namedLua+`
local TAKE = LAYOUT.TAKE
named('', TAKE, 0)
out[#out + 1] = 'values past the layout'
out[#out + 1] = tostring(#ARGV - TAKE.N)
return out
`, args...)
			want := merged(c.want, prefixFields(q, ""), map[string]string{"values past the layout": "0"})
			diffMaps(t, "TAKE", pairsMap(t, r), want)
		})
	}
}

// endWalkLua reads the end script's ARGV as end.lua does: END, then each
// record (its size, REC, its kind's tail: REC_CHILD and its counted list
// of fields; REC_STAGE and its
// three counted lists, children as FANOUT; REC_BATCH and its MEMBERs),
// and says how many values of each record it did not account for.
const endWalkLua = namedLua + `
local END, REC = LAYOUT.END, LAYOUT.REC
named('', END, 0)
local i, n = END.N + 1, 0
while i <= #ARGV do
  n = n + 1
  local p, size, tail = 'rec' .. n .. '.', tonumber(ARGV[i]), i + REC.N
  named(p, REC, i)
  local kind, after = ARGV[i + REC.kind], tail
  if kind == 'child' then
    named(p, LAYOUT.REC_CHILD, tail)
    after = tail + LAYOUT.REC_CHILD.N
    local m = tonumber(ARGV[after + 1])
    for j = 1, m do
      out[#out + 1] = p .. 'fields' .. j
      out[#out + 1] = ARGV[after + 1 + j]
    end
    after = after + 1 + m
  elseif kind == 'batch' then
    local REC_BATCH, MEMBER = LAYOUT.REC_BATCH, LAYOUT.MEMBER
    named(p, REC_BATCH, tail)
    after = tail + REC_BATCH.N
    for j = 1, tonumber(ARGV[tail + REC_BATCH.members]) do
      named(p .. 'member' .. j .. '.', MEMBER, after)
      after = after + MEMBER.N
    end
  elseif kind == 'stage' then
    local REC_STAGE, FANOUT = LAYOUT.REC_STAGE, LAYOUT.FANOUT
    named(p, REC_STAGE, tail)
    after = tail + REC_STAGE.N
    for _, list in ipairs({'index_by', 'fields'}) do
      local m = tonumber(ARGV[after + 1])
      for j = 1, m do
        out[#out + 1] = p .. list .. j
        out[#out + 1] = ARGV[after + 1 + j]
      end
      after = after + 1 + m
    end
    local m = tonumber(ARGV[after + 1])
    for c = 1, m / FANOUT.N do
      named(p .. 'child' .. c .. '.', FANOUT, after + 1 + FANOUT.N * (c - 1))
    end
    after = after + 1 + m
  end
  out[#out + 1] = p .. 'values past its layout'
  out[#out + 1] = tostring(i + size - after)
  i = i + size + 1
end
return out
`

// The end's fixed arguments (END, a take's fields among them) and each
// ending's record, as EndTakeWait sends them.
func TestLayoutRoundTripEnd(t *testing.T) {
	t.Parallel()
	q := rdb.NewKeys("lt").Queue(rdb.Standalone("q"))
	take := rdb.TakeArgs{Worker: "w9", Until: 42, Max: 3, MaxCrashes: 2, Limited: true, Levels: 1}
	es := []rdb.Ending{
		rdb.Done(rdb.KindTask, "w1", "11", "t1", []byte("r1")),
		rdb.Retry(rdb.KindTask, "w2", "12", "t2", 5000, "boom"),
		{Kind: rdb.KindChild, Worker: "w3", PID: "13", ID: "run1.c1", Ask: rdb.AskDead, Err: "bad", Run: "run1",
			Fields: []string{"f:x", "9"}},
		{Kind: rdb.KindStage, Worker: "w4", PID: "14", ID: "run2", Ask: rdb.AskDone, Stage: &rdb.StageEnd{
			Next: "s2", FailFast: true, RunRetentionMs: 7000, IndexBy: []string{"user"}, SleepMs: 1500, Await: "paid", Join: rdb.JoinAny,
			Fields:   []string{"f:a", "1", "f:b", "2"},
			Children: []rdb.Child{{ID: "run2.k1", Queue: "cq", Payload: []byte("p1"), Meta: "m1"}, {ID: "run2.k2", Queue: "cq", Payload: []byte("p2")}},
		}},
		rdb.Done(rdb.KindTask, "w5", "15", "h1", []byte("rh")).WithBatch([]rdb.Member{
			{PID: "16", ID: "m1", Result: []byte("x1")}, {PID: "17", ID: "m2", Result: []byte("x2")}}),
		rdb.GiveBack(rdb.KindStage, "w6", "18", "run3"), // a stage with no StageEnd
	}
	rec := func(n int, kind, worker, pid, id, ask, delay, err, result string, more ...string) map[string]string {
		p := fmt.Sprintf("rec%d.", n)
		m := map[string]string{p + "kind": kind, p + "worker": worker, p + "pid": pid, p + "id": id,
			p + "ask": ask, p + "delay": delay, p + "err": err, p + "result": result, p + "values past its layout": "0"}
		for i := 0; i < len(more); i += 2 {
			m[p+more[i]] = more[i+1]
		}
		return m
	}
	want := merged(
		prefixFields(q, ""),
		map[string]string{"wake_channel": q.WakeChannel, "retention": "60000"},
		takeFields("w9", "3", "42", "2", "task", "1", "1", "1", "0", "0", "0"),
		rec(1, "task", "w1", "11", "t1", "done", "0", "", "r1"),
		rec(2, "task", "w2", "12", "t2", "retry", "5000", "boom", ""),
		rec(3, "child", "w3", "13", "run1.c1", "dead", "0", "bad", "", "run", "run1", "fields1", "f:x", "fields2", "9"),
		rec(4, "stage", "w4", "14", "run2", "done", "0", "", "",
			"next_stage", "s2", "policy", "failfast any", "run_retention", "7000", "sleep", "1500", "await", "paid", "index_by1", "user",
			"fields1", "f:a", "fields2", "1", "fields3", "f:b", "fields4", "2",
			"child1.id", "run2.k1", "child1.queue", "cq", "child1.payload", "p1", "child1.meta", "m1",
			"child2.id", "run2.k2", "child2.queue", "cq", "child2.payload", "p2", "child2.meta", ""),
		rec(5, "batch", "w5", "15", "h1", "done", "0", "", "rh", "members", "2",
			"member1.pid", "16", "member1.id", "m1", "member1.result", "x1",
			"member2.pid", "17", "member2.id", "m2", "member2.result", "x2"),
		rec(6, "stage", "w6", "18", "run3", "back", "0", "", "",
			"next_stage", "", "policy", "continue", "run_retention", "0", "sleep", "0", "await", ""),
	)
	r := evalLua(t, endWalkLua, rdb.EndArgv(q, 60000, take, true, es)...)
	diffMaps(t, "END", pairsMap(t, r), want)
}

// rowsLua lays out rows given by name (a JSON document in ARGV[1]) by the
// layouts, as the scripts build their replies.
const rowsLua = `
local doc = cjson.decode(ARGV[1])
local function rows(L, list)
  local out = {}
  for _, row in ipairs(list) do
    local r = #out
    for f, v in pairs(row) do
      if not L[f] then
        error('no field ' .. f)
      end
      out[r + L[f]] = v
    end
  end
  return out
end
`

func jsonArg(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type row map[string]any

// takenRow is a full TAKEN row (every field: a missing one would cut the
// reply short).
func takenRow(id, pid string, payload, attempt any, crashes int, maxAttempts, timeout, parent string) row {
	return row{"id": id, "pid": pid, "payload": payload, "attempt": attempt, "crashes": crashes,
		"max_attempts": maxAttempts, "timeout": timeout, "parent": parent}
}

// A take's reply (TAKEN rows, then the limit's wait), laid out by name in
// Lua, as Take decodes it.
func TestLayoutRoundTripTaken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		a        rdb.TakeArgs
		rows     []row
		wait     any
		want     []rdb.Taken
		wantWait rdb.LimitWait
	}{
		{"task queue: handed out, past its deadline, cancelled, buried", rdb.TakeArgs{}, []row{
			takenRow("t1", "5", "p1", 2, 1, "7", "3000", ""),
			takenRow("t2", "6", "p2", 0, 0, "", "", ""),
			takenRow("t3", "7", "p3", -1, 0, "", "", ""),
			takenRow("t4", "", "corrupt: no payload", "", 0, "", "", ""),
		}, nil, []rdb.Taken{
			{ID: "t1", PID: "5", Payload: []byte("p1"), Attempt: 2, Crashes: 1, MaxAttempts: 7, TimeoutMs: 3000},
			{ID: "t2", PID: "6", Payload: []byte("p2"), Attempt: 0, Expired: true},
			{ID: "t3", PID: "7", Payload: []byte("p3"), Attempt: -1, Expired: true, Cancelled: true},
			{ID: "t4", Reason: "corrupt: no payload"},
		}, 0},
		{"batch: the member's parent field is its head", rdb.TakeArgs{Batch: 3}, []row{
			takenRow("h1", "8", "ph", 1, 0, "", "", ""),
			takenRow("m1", "9", "pm", 1, 0, "", "", "h1"),
		}, -1, []rdb.Taken{
			{ID: "h1", PID: "8", Payload: []byte("ph"), Attempt: 1},
			{ID: "m1", PID: "9", Payload: []byte("pm"), Attempt: 1, Head: "h1"},
		}, rdb.WaitWake},
		{"stage: the run's hash, or its size", rdb.TakeArgs{Stage: true}, []row{
			takenRow("r1", "10", []string{"f:a", "1"}, 1, 0, "", "", ""),
			takenRow("r2", "11", 4321, 1, 0, "", "", ""),
		}, 250, []rdb.Taken{
			{ID: "r1", PID: "10", Run: map[string]string{"f:a": "1"}, Attempt: 1},
			{ID: "r2", PID: "11", Run: map[string]string{}, RunUnread: 4321, Attempt: 1},
		}, 250},
		{"child: metadata, and a buried child's stopped siblings", rdb.TakeArgs{Child: true}, []row{
			takenRow("run.c1", "12", []string{"pc", "meta"}, 1, 0, "", "", "run"),
			takenRow("run.c2", "", "crashed", []string{"cq", "run.c3"}, 0, "", "", ""),
		}, nil, []rdb.Taken{
			{ID: "run.c1", PID: "12", Payload: []byte("pc"), Meta: "meta", Attempt: 1, Parent: "run"},
			{ID: "run.c2", Reason: "crashed", Stopped: []rdb.QueuedTask{{Queue: "cq", ID: "run.c3"}}},
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			doc := map[string]any{"rows": c.rows}
			if c.wait != nil {
				doc["wait"] = c.wait
			}
			r := evalLua(t, rowsLua+`
local out = rows(LAYOUT.TAKEN, doc.rows)
if doc.wait then
  out[#out + 1] = doc.wait
end
return out
`, jsonArg(t, doc))
			vals, err := redis.Values(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, wait, err := rdb.DecodeTaken(vals, c.a)
			if err != nil || !reflect.DeepEqual(got, c.want) || wait != c.wantWait {
				t.Errorf("decoded %+v, wait %d, %v\nwant %+v, wait %d", got, wait, err, c.want, c.wantWait)
			}
		})
	}
}

// The end's reply (END_REPLY: ENDED rows, the take's TAKEN rows, the
// members' outcomes, STOPPED rows), laid out by name in Lua, as End
// decodes it.
func TestLayoutRoundTripEndReply(t *testing.T) {
	t.Parallel()
	es := []rdb.Ending{
		rdb.Done(rdb.KindTask, "w", "1", "t1", nil),
		{Kind: rdb.KindChild, Worker: "w", PID: "2", ID: "run.c1", Ask: rdb.AskDead, Run: "run"},
		rdb.Done(rdb.KindTask, "w", "3", "h1", nil).WithBatch([]rdb.Member{{PID: "4", ID: "m1"}, {PID: "5", ID: "m2"}}),
	}
	doc := map[string]any{
		"ends": []row{
			{"outcome": int(rdb.OutcomeDone), "run": int(rdb.OutcomeLost)},
			{"outcome": int(rdb.OutcomeDead), "run": int(rdb.OutcomeDead)},
			{"outcome": int(rdb.OutcomeDone), "run": int(rdb.OutcomeLost)},
		},
		"taken":   []row{takenRow("t9", "6", "p9", 1, 0, "", "", "")},
		"members": []int{int(rdb.OutcomeDone), int(rdb.OutcomeCancelled)},
		"stopped": []row{{"at": "2", "queue": "cq", "id": "run.c2"}, {"at": "2", "queue": "cq", "id": "run.c3"}},
	}
	r := evalLua(t, rowsLua+`
local R, reply = LAYOUT.END_REPLY, {}
reply[R.ends] = rows(LAYOUT.ENDED, doc.ends)
reply[R.taken] = rows(LAYOUT.TAKEN, doc.taken)
reply[R.members] = doc.members
reply[R.stopped] = rows(LAYOUT.STOPPED, doc.stopped)
return reply
`, jsonArg(t, doc))
	vals, err := redis.Values(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended, taken, wait, err := rdb.DecodeEnded(vals, es, rdb.TakeArgs{Max: 1})
	wantEnded := []rdb.Ended{
		{Outcome: rdb.OutcomeDone},
		{Outcome: rdb.OutcomeDead, Run: rdb.OutcomeDead,
			Stopped: []rdb.QueuedTask{{Queue: "cq", ID: "run.c2"}, {Queue: "cq", ID: "run.c3"}}},
		{Outcome: rdb.OutcomeDone, Members: []rdb.Outcome{rdb.OutcomeDone, rdb.OutcomeCancelled}},
	}
	wantTaken := []rdb.Taken{{ID: "t9", PID: "6", Payload: []byte("p9"), Attempt: 1}}
	if err != nil || !reflect.DeepEqual(ended, wantEnded) || !reflect.DeepEqual(taken, wantTaken) || wait != 0 {
		t.Errorf("decoded %+v, %+v, wait %d, %v\nwant %+v, %+v", ended, taken, wait, err, wantEnded, wantTaken)
	}
	// A reply that is not the layout's width is refused, not misread.
	if _, _, _, err := rdb.DecodeEnded(vals[:len(vals)-1], es, rdb.TakeArgs{}); err == nil ||
		!strings.Contains(err.Error(), "reply of") {
		t.Errorf("a reply one value short: err = %v, want one naming its size", err)
	}
}

package rdb_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
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
		"park_ms": parkMs}
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

// The end's fixed arguments (END, a take's fields among them), as
// EndTakeWait sends them before the endings' records.
func TestLayoutRoundTripEnd(t *testing.T) {
	t.Parallel()
	q := rdb.NewKeys("lt").Queue(rdb.Standalone("q"))
	take := rdb.TakeArgs{Worker: "w9", Until: 42, Max: 3, MaxCrashes: 2, Limited: true, Levels: 1}
	want := merged(
		prefixFields(q, ""),
		map[string]string{"wake_channel": q.WakeChannel, "retention": "60000", "values past the layout": "0"},
		takeFields("w9", "3", "42", "2", "task", "1", "1", "1", "0", "0", "0"),
	)
	r := evalLua(t, namedLua+`
local END = LAYOUT.END
named('', END, 0)
out[#out + 1] = 'values past the layout'
out[#out + 1] = tostring(#ARGV - END.N)
return out
`, rdb.EndArgv(q, 60000, take, true, nil)...)
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

package rdb_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

func TestPeriodicScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.k
	must := func(ok bool, err error) bool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	sched := func(def, timing, next, last, fired string, paused bool) hash {
		h := hash{"d": def, "k": timing, "n": next}
		if last != "" {
			h["l"], h["f"] = last, fired
		}
		if paused {
			h["p"] = "1"
		}
		return h
	}
	// A new schedule: due at its first tick.
	if !must(e.st.PutSchedule(e.ctx, "a", []byte("d1"), "every:1000", 1000)) {
		t.Fatal("put of a new schedule: timing not set")
	}
	want := state{
		k.Schedule("a"):   sched("d1", "every:1000", "1000", "", "", false),
		k.ScheduleDue():   zset{{"a", "1000"}},
		k.ScheduleNames(): set{"a"},
	}
	e.checkState(t, nil, func(*env) state { return want })
	// The same timing again, another definition: the next tick stays.
	if must(e.st.PutSchedule(e.ctx, "a", []byte("d2"), "every:1000", 9000)) {
		t.Fatal("put with the same timing: timing set again")
	}
	want[k.Schedule("a")] = sched("d2", "every:1000", "1000", "", "", false)
	e.checkState(t, nil, func(*env) state { return want })

	// Due at 1500 (a time given instead of Redis's), not at 999.
	now, due, err := e.st.DueSchedules(e.ctx, 999, 10)
	if err != nil || now != 999 || len(due) != 0 {
		t.Fatalf("due at 999: %d %+v %v", now, due, err)
	}
	now, due, err = e.st.DueSchedules(e.ctx, 1500, 10)
	if err != nil || now != 1500 || len(due) != 1 || !reflect.DeepEqual(due[0], rdb.DueSchedule{Name: "a", Def: []byte("d2"), Next: 1000}) {
		t.Fatalf("due at 1500: %d %+v %v", now, due, err)
	}

	// Advance: a compare-and-set on the next tick.
	if !must(e.st.AdvanceSchedule(e.ctx, "a", "every:1000", 1000, 2000, 1000, 1)) {
		t.Fatal("advance from the current tick refused")
	}
	want[k.Schedule("a")] = sched("d2", "every:1000", "2000", "1000", "1", false)
	want[k.ScheduleDue()] = zset{{"a", "2000"}}
	e.checkState(t, nil, func(*env) state { return want })
	// Run again (a racing peer, a retry after a lost reply): nothing.
	before := e.dump(t)
	if must(e.st.AdvanceSchedule(e.ctx, "a", "every:1000", 1000, 3000, 2000, 2)) {
		t.Fatal("a stale advance applied")
	}
	e.checkState(t, before, nil)

	// Pause: out of the due set; an advance still moves the tick.
	if !must(e.st.PauseSchedule(e.ctx, "a")) {
		t.Fatal("pause refused")
	}
	if !must(e.st.AdvanceSchedule(e.ctx, "a", "every:1000", 2000, 4000, 0, 0)) {
		t.Fatal("advance of a paused schedule refused")
	}
	want[k.Schedule("a")] = sched("d2", "every:1000", "4000", "1000", "1", true)
	delete(want, k.ScheduleDue())
	e.checkState(t, nil, func(*env) state { return want })
	if _, due, _ := e.st.DueSchedules(e.ctx, 99999, 10); len(due) != 0 {
		t.Fatalf("a paused schedule is due: %+v", due)
	}
	// A put with a new timing while paused: the tick moves, still paused.
	must(e.st.PutSchedule(e.ctx, "a", []byte("d3"), "every:5000", 5000))
	want[k.Schedule("a")] = sched("d3", "every:5000", "5000", "1000", "1", true)
	e.checkState(t, nil, func(*env) state { return want })
	// Resume at a new tick; resuming again changes nothing.
	// A resume worked out from another timing changes nothing.
	if _, err := e.st.ResumeSchedule(e.ctx, "a", "every:1000", 3000); !errors.Is(err, rdb.ErrTimingChanged) {
		t.Fatalf("a resume from the old timing: %v, want ErrTimingChanged", err)
	}
	e.checkState(t, nil, func(*env) state { return want })
	must(e.st.ResumeSchedule(e.ctx, "a", "every:5000", 10000))
	want[k.Schedule("a")] = sched("d3", "every:5000", "10000", "1000", "1", false)
	want[k.ScheduleDue()] = zset{{"a", "10000"}}
	e.checkState(t, nil, func(*env) state { return want })
	before = e.dump(t)
	must(e.st.ResumeSchedule(e.ctx, "a", "every:5000", 20000))
	e.checkState(t, before, nil)

	// Remove, then every op on it reports it missing and writes nothing.
	if !must(e.st.RemoveSchedule(e.ctx, "a")) {
		t.Fatal("remove refused")
	}
	e.checkState(t, nil, func(*env) state { return state{} })
	for _, f := range []func() (bool, error){
		func() (bool, error) { return e.st.RemoveSchedule(e.ctx, "a") },
		func() (bool, error) { return e.st.PauseSchedule(e.ctx, "a") },
		func() (bool, error) { return e.st.ResumeSchedule(e.ctx, "a", "every:5000", 1) },
		func() (bool, error) { return e.st.AdvanceSchedule(e.ctx, "a", "every:1000", 10000, 11000, 10000, 1) },
	} {
		if must(f()) {
			t.Fatal("an op on a removed schedule applied")
		}
	}
	e.checkState(t, nil, func(*env) state { return state{} })
	if r, err := e.st.Schedule(e.ctx, "a"); r != nil || err != nil {
		t.Fatalf("removed schedule read: %+v %v", r, err)
	}
}

// A name left in the due set without its hash (written by hand, or a bug)
// is dropped by the next read of the due schedules.
func TestPeriodicDueDropsNamesWithoutHash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do(t, "ZADD", e.k.ScheduleDue(), 1, "ghost")
	if _, due, err := e.st.DueSchedules(e.ctx, 10, 10); err != nil || len(due) != 0 {
		t.Fatalf("due: %+v %v", due, err)
	}
	e.checkState(t, nil, func(*env) state { return state{} })
}

// An advance placed with another timing than the stored one (a pass that
// read the definition before a re-registration that kept the next tick)
// changes nothing.
func TestPeriodicAdvanceComparesTheTiming(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.st.PutSchedule(e.ctx, "a", []byte("d1"), "every:60000", 120000); err != nil {
		t.Fatal(err)
	}
	// Re-registered with a new timing whose first tick is the same.
	if _, err := e.st.PutSchedule(e.ctx, "a", []byte("d2"), "every:120000", 120000); err != nil {
		t.Fatal(err)
	}
	before := e.dump(t)
	ok, err := e.st.AdvanceSchedule(e.ctx, "a", "every:60000", 120000, 180000, 120000, 1)
	if err != nil || ok {
		t.Fatalf("advance with the old timing = %v, %v; want refused", ok, err)
	}
	e.checkState(t, before, nil)
	if ok, err := e.st.AdvanceSchedule(e.ctx, "a", "every:120000", 120000, 240000, 120000, 1); err != nil || !ok {
		t.Fatalf("advance with the stored timing = %v, %v; want applied", ok, err)
	}
}

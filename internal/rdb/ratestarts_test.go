package rdb_test

import (
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// The rate limit counts starts. A task the take finds past its deadline
// (handed out with attempt 0, to be ended as expired) or cancelled where it
// waited (attempt -1) is never started, yet each was logged as a start: a
// backlog of expired tasks used up the rate, and a live task behind them
// waited a whole period per Rate of them (here a minute, for a rate of 2
// per minute, with two expired tasks ahead). They are not logged now.
func TestTakingsNeverRunAreNotRateStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{Rate: 2, PeriodMs: 60000}); err != nil {
		t.Fatal(err)
	}
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DeadlineMs: 1}, "late")
	e.enqueue(t, "gone", "live")
	// Marked where it waits, as a cancel marks a task deep in a long list.
	e.do(t, "HSET", e.q.Task("gone"), "x", "1", "s", "cancelled")
	got, wait := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if len(got) != 2 || got[0].ID != "late" || !got[0].Expired || !got[1].Cancelled {
		t.Fatalf("take = %+v, want the expired task and the cancelled one", got)
	}
	if wait != 0 {
		t.Errorf("take of two tasks not to run: wait %d ms, want none (the rate is not used)", wait)
	}
	e.endTask(t, 0, rdb.Expire("A", got[0].PID, got[0].ID))
	e.endTask(t, 0, rdb.Ending{Kind: rdb.KindTask, Worker: "A", PID: got[1].PID, ID: got[1].ID, Ask: rdb.AskCancel})
	if n, _ := redis.Int(e.c.Do("ZCARD", e.q.RateLog())); n != 0 {
		t.Errorf("rate log holds %d starts, want none: nothing was run", n)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"live"}) {
		t.Errorf("take = %v (wait %d ms), want [live]: the tasks never run used up the rate", takenIDs(got), wait)
	}
	if wait != 0 {
		t.Errorf("take of [live] with one start left: wait %d ms, want none", wait)
	}

	// A take that finds fewer tasks than the rate has left does not use
	// it up either: no wait (the worker would hold off a task enqueued
	// right after for the rest of the period, or until its next poll).
	e.enqueue(t, "next")
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 1, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"next"}) || wait < 59000 {
		t.Errorf("take = %v, wait %d ms; want [next] and the period's wait: the rate is used up", takenIDs(got), wait)
	}
	e.do(t, "DEL", e.q.RateLog())
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if len(got) != 0 || wait != 0 {
		t.Errorf("take of an empty queue with the whole rate left = %v, wait %d ms; want nothing and no wait", takenIDs(got), wait)
	}
}

package rdb_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A task a Client waits for (MarkWaited) has its end published on its
// queue's ended channel by the end script itself, in the same call: done,
// dead, cancelled and expired, not a retry. A task nobody marked costs its
// end no command more.
func TestMarkWaitedEndsArePublished(t *testing.T) {
	e := newEnv(t)
	st := rdb.NewStore(e.pool, e.ns) // a plain pool, for MONITOR's counts
	a := newKeyAuditor(t, e.ns)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	msgs := make(chan string, 16)
	ready := make(chan struct{}, 1)
	go func() {
		_ = st.Listen(ctx, []string{e.q.EndedChannel}, func() { ready <- struct{}{} },
			func(_ string, data []byte) { msgs <- string(data) })
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription to the ended channel was not confirmed")
	}
	e.enqueue(t, "plain", "waited", "failing", "retried")
	for _, id := range []string{"waited", "failing", "retried"} {
		if ok, err := st.MarkWaited(e.ctx, e.q, id); err != nil || !ok {
			t.Fatalf("MarkWaited(%s) = %v, %v", id, ok, err)
		}
	}
	if ok, err := st.MarkWaited(e.ctx, e.q, "nosuch"); err != nil || ok {
		t.Fatalf("MarkWaited of no task = %v, %v; want false", ok, err)
	}
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.Task("nosuch"))); n != 0 {
		t.Fatal("MarkWaited of no task made its hash")
	}
	got, err := st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 4})
	if err != nil || len(got) != 4 {
		t.Fatalf("take: %v, %v", got, err)
	}
	pid := map[string]string{}
	for _, g := range got {
		pid[g.ID] = g.PID
	}
	end := func(en rdb.Ending) int {
		t.Helper()
		return scriptCommands(t, a, func() {
			if _, err := st.End(e.ctx, e.q, 0, []rdb.Ending{en}); err != nil {
				t.Fatal(err)
			}
		})["end"]
	}
	plain := end(rdb.Done(rdb.KindTask, "A", pid["plain"], "plain", nil))
	waited := end(rdb.Done(rdb.KindTask, "A", pid["waited"], "waited", nil))
	if waited != plain+1 {
		t.Errorf("the end of a waited task ran %d commands, of a task nobody waits for %d; want one more (the PUBLISH)", waited, plain)
	}
	end(rdb.Retry(rdb.KindTask, "A", pid["retried"], "retried", 60000, "later"))
	end(rdb.Dead(rdb.KindTask, "A", pid["failing"], "failing", "boom"))
	for _, want := range []string{"done waited", "dead failing"} {
		select {
		case m := <-msgs:
			if m != want {
				t.Errorf("ended channel: %q, want %q", m, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %q on the ended channel", want)
		}
	}
}

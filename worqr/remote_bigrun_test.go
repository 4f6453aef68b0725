package worqr_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A remote session whose take got a run too big to come with it, and could
// not read it, gives the taking back at once: it waited, held by the live
// session, for its next take from that queue, which a remote may never
// make. The run is taken again, whole, once reads work.
func TestRemoteGivesBackARunItCouldNotRead(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	pool := newFaultPool(base)
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{{Name: "s1"}}}
	r, err := worqr.NewRemote(pool, &worqr.RemoteConfig{Config: worqr.Config{Namespace: ns, DisableEvents: true},
		Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	})
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &cfg)
	cf := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}}}}
	id, err := c.StartRun(ctx, cf, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The records of earlier fan-outs: 6,000 fields, over what a take hands out.
	conn := base.Get()
	defer conn.Close()
	args := []any{ns + ":{wide}:t:" + id}
	for i := range 3000 {
		k := id + ".k" + strconv.Itoa(i)
		args = append(args, "k:"+k, "done", "kq:"+k, "kids")
	}
	if _, err := conn.Do("HSET", args...); err != nil {
		t.Fatal(err)
	}
	s, err := r.Open(ctx, worqr.OpenOpts{Name: "wide", Queues: []string{"wide/s1"}})
	if err != nil {
		t.Fatal(err)
	}
	pool.refuse.Store("HSCAN") // the run's read in steps fails
	if ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "wide/s1", Max: 1}); err == nil {
		t.Fatalf("take with the run's read failing = %+v, nil; want an error", ks)
	}
	held, err := redis.Int(conn.Do("HLEN", ns+":{wide}:wq:s1:"+s.ID()))
	if err != nil || held != 0 {
		t.Fatalf("after the failed read the session holds %d takings (%v), want none: given back at once", held, err)
	}
	if n := queueLen(t, in, "wide/s1"); n != 1 {
		t.Fatalf("the stage's queue holds %d, want the run back", n)
	}
	pool.refuse.Store("")
	ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "wide/s1", Max: 1})
	if err != nil || len(ks) != 1 || ks[0].TaskID != id || len(ks[0].Children) != 3000 {
		t.Fatalf("take after reads work again = %d takings, %v; want the run with its 3,000 children", len(ks), err)
	}
}

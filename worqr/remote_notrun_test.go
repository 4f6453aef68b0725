package worqr_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// TestRemoteStageCancelledDeepEndsAsStage: a run cancelled while it waited
// deep in its stage's list (past STOP_SCAN entries) stays there, marked,
// and the take that reaches it hands it out not to run. A remote session
// ends such a taking itself (rdb.NotRun); the taking it keeps has no run
// state (dropped to save memory), so the end must still be a stage's: as a
// plain task's, end.lua finalized the run's hash with the stage queue's
// retention (0: deleted) and the cancelled run vanished.
func TestRemoteStageCancelledDeepEndsAsStage(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rdeep", Stages: []worqr.Stage{{Name: "only"}}}
	b := setupRemote(t, ctx, worqr.RemoteConfig{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rdeep", Stages: []worqr.Stage{
		{Name: "only", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := b.client.StartRun(ctx, cf, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 20,000 ids of other runs behind it: the cancel marks it where it waits.
	c := srv.Pool().Get()
	defer c.Close()
	list := b.ns + ":{rdeep}:q:only"
	for lo := 0; lo < 20000; lo += 1000 {
		args := []any{list}
		for i := lo; i < lo+1000; i++ {
			args = append(args, "other"+strconv.Itoa(i))
		}
		if _, err := c.Do("RPUSH", args...); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := b.client.CancelRun(ctx, cf, runID); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	s := open(t, b, "rdeep/only")
	ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "rdeep/only", Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 0 {
		t.Fatalf("took %+v: the cancelled run was handed to run", ks)
	}
	info, err := b.insp.Run(ctx, cf.Name, runID)
	if err != nil {
		t.Fatalf("run after the remote's take: %v; want it kept, cancelled", err)
	}
	if info.Status != worqr.RunCancelled {
		t.Fatalf("run status %q, want cancelled", info.Status)
	}
	if n, _ := c.Do("HLEN", b.ns+":{rdeep}:wq:only:"+s.ID()); n.(int64) != 0 {
		t.Fatalf("the session still holds %d takings", n)
	}
}

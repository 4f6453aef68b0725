package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// A run cancelled while a remote runs its stage is reported to the remote
// by its beats, as a cancelled task is: a remote hears of cancels only
// through Beat (it has no cancel channel), and a beat read the cancel mark
// ('x'), which run_cancel sets on the running stage task and end_run drops
// in the same call (a run's status stands for its mark): the remote's
// stage ran to its end, however long, for a run that was cancelled.
func TestRemoteBeatReportsACancelledRun(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rcan", Stages: []worqr.Stage{{Name: "only"}}}
	b := setupRemote(t, ctx, worqr.RemoteConfig{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rcan", Stages: []worqr.Stage{
		{Name: "only", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1}},
	}}
	runID, err := b.client.StartRun(ctx, cf, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "rcan/only")
	k := takeOne(t, s, "rcan/only", 0)
	if k.TaskID != runID {
		t.Fatalf("took %s, want run %s", k.TaskID, runID)
	}
	if ok, err := b.client.CancelRun(ctx, cf, runID); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	var rep worqr.BeatReply
	for len(rep.Cancel) == 0 && time.Now().Before(deadline) {
		if rep, err = s.Beat(ctx, []string{k.PID}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(rep.Cancel) != 1 || rep.Cancel[0] != k.PID {
		t.Fatalf("beat cancels %v, want [%s]: the run's cancel never reached the remote", rep.Cancel, k.PID)
	}
	if out, err := s.Finish(ctx, k.PID, nil); err != nil || out != worqr.EventCancelled {
		t.Errorf("finish of the cancelled run's stage = %q, %v; want cancelled", out, err)
	}
}

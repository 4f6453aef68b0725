package worqr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// A dead child whose run data is corrupt (not a hash) is refused, as any
// child whose run no longer waits for it: reading it with redis.call
// aborted the script, and RequeueAllDead of the queue failed for good on
// it (found by a review).
func TestDeadChildOfACorruptRun(t *testing.T) {
	ctx := context.Background()
	d := newDeadChildFlow(true)
	_, in, id := d.start(t)
	var dead []string
	wait(t, 20*time.Second, "the child to die", func() bool { dead = deadIDs(t, in, "fl/kids"); return len(dead) == 1 })
	conn := srv.Pool().Get()
	defer conn.Close()
	runKey := rdb.NewKeys(d.ns).Queue(rdb.QueueRef{Tag: "fl", Name: "fl"}).Task(id)
	if _, err := conn.Do("DEL", runKey); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Do("SET", runKey, "corrupt"); err != nil {
		t.Fatal(err)
	}
	d.fail.Store(false)
	if n, err := in.RequeueAllDead(ctx, "fl/kids", nil); n != 0 || err != nil {
		t.Errorf("RequeueAllDead with a corrupt run = %d, %v; want 0, nil (the child passed)", n, err)
	}
	if n, err := in.RequeueDead(ctx, "fl/kids", dead[0]); n != 0 || !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), dead[0]) {
		t.Errorf("RequeueDead with a corrupt run = %d, %v; want 0 and ErrInvalid naming it", n, err)
	}
	if got := deadIDs(t, in, "fl/kids"); len(got) != 1 {
		t.Errorf("dead children %v, want the one still there", got)
	}
}

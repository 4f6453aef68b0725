package rdb_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A run cancelled while it waits deep in a long stage queue stays there,
// marked (its status cancelled), for the take that reaches it: the take
// hands it out never to be run, and its end drops it. The cancel gave the
// run its retention at once, so a run whose retention ran out before a
// take reached it was taken as an id with no data: buried as "missing"
// into the stage's dead set, an ended run listed dead (and a requeue of it
// ran junk). The run is kept until its taking ends; that end gives it its
// retention.
func TestRunCancelledDeepOutlivesItsWait(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"its end", "the requeue of its dead worker"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			f.ref.RetentionMillis = 100
			f.start(t, f.s1, "r1")
			fill := make([]any, 0, 20_001)
			fill = append(fill, f.s1.Waiting)
			for i := 0; i < 20_000; i++ {
				fill = append(fill, "z"+strconv.Itoa(i))
			}
			f.do(t, "RPUSH", fill...)
			f.runCancel(t, "r1")
			// The take reaches it after its retention.
			f.do(t, "LTRIM", f.s1.Waiting, 0, 0)
			time.Sleep(300 * time.Millisecond)
			got := f.takeFrom(t, f.s1, "A", 1, true)
			if n, _ := redis.Int(f.do(t, "ZCARD", f.s1.Dead), nil); n != 0 {
				ids, _ := redis.Strings(f.do(t, "ZRANGE", f.s1.Dead, 0, -1), nil)
				t.Fatalf("the stage's dead set holds %v: the cancelled run, buried as missing", ids)
			}
			if len(got) != 1 || got[0].ID != "r1" || !got[0].Cancelled {
				t.Fatalf("took %+v, want r1 handed out not to run", got)
			}
			if how == "its end" {
				if ended := f.endIn(t, f.s1, 0, rdb.NotRun("A", got[0])); ended[0].Outcome != rdb.OutcomeCancelled {
					t.Fatalf("its end: %v, want cancelled", ended[0].Outcome)
				}
			} else if _, _, err := f.st.Requeue(f.ctx, f.s1, []string{"A"}, true); err != nil {
				t.Fatal(err)
			}
			pttl, _ := redis.Int64(f.do(t, "PTTL", f.s1.Task("r1")), nil)
			if pttl <= 0 || pttl > 100 {
				t.Fatalf("the run's PTTL after %s: %d, want its retention (100 ms)", how, pttl)
			}
			if n, _ := redis.Int(f.do(t, "LLEN", f.s1.Waiting), nil); n != 0 {
				t.Fatalf("%d left waiting in the stage, want none", n)
			}
		})
	}
}

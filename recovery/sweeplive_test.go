package recovery_test

import (
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Sweep requeues the holdings of a holder that is neither registered nor
// alive. A holder whose keepalive lives but whose registration is gone (a
// failover of the registry's master lost it on a Redis Cluster) is alive:
// it puts back what it holds itself, and runs it meanwhile. Sweep must leave
// its takings alone (two owners otherwise).
func TestSweepLeavesAnUnregisteredLiveHolderAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, e.q, "l1", "z1")
	e.take(t, e.q, "L", 1) // L lives, unregistered
	e.take(t, e.q, "Z", 1) // Z is dead, unregistered
	e.do(t, "SET", e.k.Keepalive("L"), "RUN", "PX", 60_000)
	if err := e.st.AddKnownQueues(e.ctx, []rdb.QueueRef{e.q.Ref}); err != nil {
		t.Fatal(err)
	}
	res, err := e.reaper(t, "r1").Sweep(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || !reflect.DeepEqual(res[0].Workers, []string{"Z"}) || res[0].Requeued != 1 {
		t.Fatalf("Sweep = %+v, want Z's one taking requeued, L's left", res)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"z1"}) {
		t.Errorf("waiting = %v, want [z1]: the live holder's taking stays held", w)
	}
	if h := e.strings(t, "HVALS", e.q.WorkerQueue("L")); !reflect.DeepEqual(h, []string{"l1"}) {
		t.Errorf("L holds %v, want [l1]", h)
	}
	if hs := e.strings(t, "SMEMBERS", e.q.Holders); !reflect.DeepEqual(hs, []string{"L"}) {
		t.Errorf("holders = %v, want [L]", hs)
	}
}

package recovery_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
)

// A queue whose requeue fails (here its parked-workers key is not a hash:
// a hand edit, a key of another program) must not keep a dead worker's
// takings in its other queues from being offered again: Pass went through
// the worker's queues in order and returned at the first error, without
// forgetting the worker, so every pass failed at the same queue and the
// takings in the queues after it stayed held for good (a limited queue
// lost those slots for good too). Pass requeues the others, reports the
// failure, and keeps the worker registered for the queue that failed.
func TestPassGoesPastAQueueThatFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := e.st.Queue(standalone("broken"))
	var fine []rdb.QueueKeys
	refs := []registry.Queue{broken.Ref}
	for _, name := range []string{"fine1", "fine2"} {
		qk := e.st.Queue(standalone(name))
		fine = append(fine, qk)
		refs = append(refs, qk.Ref)
	}
	e.register(t, "A", refs...)
	for _, qk := range append([]rdb.QueueKeys{broken}, fine...) {
		e.enqueue(t, qk, "t-"+qk.Ref.Name)
		if got := e.take(t, qk, "A", 1); len(got) != 1 {
			t.Fatalf("take from %s = %v", qk.Ref.Name, got)
		}
	}
	e.kill(t, "A")
	e.do(t, "SET", broken.Park, "not a hash")

	r := e.reaper(t, "r1")
	res, err := r.Pass(e.ctx)
	if err == nil || !strings.Contains(err.Error(), broken.Ref.Member()) {
		t.Errorf("Pass error = %v, want the broken queue's (%s)", err, broken.Ref.Member())
	}
	for _, qk := range fine {
		if w := e.waiting(t, qk); !reflect.DeepEqual(w, []string{"t-" + qk.Ref.Name}) {
			t.Errorf("%s waiting = %v, want the dead worker's taking back: one queue's failure kept it held", qk.Ref.Name, w)
		}
	}
	if len(res) != len(fine) {
		t.Errorf("Pass returned %+v, want the %d queues requeued", res, len(fine))
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); !reflect.DeepEqual(ws, []string{"A"}) {
		t.Errorf("workers = %v: A, whose takings in %s are still held, was forgotten", ws, broken.Ref.Name)
	}

	// Mended, the next pass requeues the rest and forgets the worker.
	e.do(t, "DEL", broken.Park)
	if _, err := r.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	if w := e.waiting(t, broken); !reflect.DeepEqual(w, []string{"t-broken"}) {
		t.Errorf("broken waiting = %v after the mend, want its taking back", w)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); len(ws) != 0 {
		t.Errorf("workers = %v after the last requeue, want none", ws)
	}
}

// A known queue whose holder index is not a set (a hand edit, a key of
// another program) failed the whole Sweep: the orphaned takings of every
// other queue stayed held at every sweep. Sweep goes past it and reports
// it.
func TestSweepGoesPastABrokenHolderIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := e.st.Queue(standalone("broken"))
	e.enqueue(t, e.q, "z1")
	e.take(t, e.q, "Z", 1) // Z never registered
	if err := e.st.AddKnownQueues(e.ctx, []rdb.QueueRef{broken.Ref, e.q.Ref}); err != nil {
		t.Fatal(err)
	}
	e.do(t, "SET", broken.Holders, "not a set")
	r := e.reaper(t, "r1")
	res, err := r.Sweep(e.ctx)
	if err == nil || !strings.Contains(err.Error(), broken.Ref.Member()) {
		t.Errorf("Sweep error = %v, want the broken queue's (%s)", err, broken.Ref.Member())
	}
	want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"Z"}, Requeued: 1}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Sweep = %+v, want %+v: one queue's broken index kept the others' orphans held", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"z1"}) {
		t.Errorf("waiting = %v, want [z1]", w)
	}
}

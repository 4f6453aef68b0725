package recovery_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// A queue whose move fails (here its scheduled set is not a sorted set: a
// hand edit, a key of another program) must not stop the mover for the
// other queues: Move went through the known queues in order and returned
// at the first error, so every pass stopped there, and the delayed tasks
// and retries of every queue after it were never moved (every reaper reads
// the queues in the same order). Move goes on with the others and reports
// the failure.
func TestMoveGoesPastAQueueThatFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var refs []registry.Queue
	for i := 0; i < 12; i++ {
		refs = append(refs, standalone(fmt.Sprintf("m%02d", i)))
	}
	e.register(t, "A", refs...)
	known, err := e.st.KnownQueues(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(known) != len(refs) {
		t.Fatalf("known queues = %v, want the %d registered", known, len(refs))
	}
	// The first queue the mover reads is the broken one.
	broken := e.st.Queue(known[0])
	e.do(t, "SET", broken.Scheduled, "not a sorted set")
	var fine []rdb.QueueKeys
	for _, q := range known[1:] {
		qk := e.st.Queue(q)
		fine = append(fine, qk)
		e.enqueueDue(t, qk, 1000, "t-"+q.Name)
	}

	n, err := e.reaper(t, "r1").Move(e.ctx)
	if err == nil || !strings.Contains(err.Error(), known[0].Member()) {
		t.Errorf("Move error = %v, want the broken queue's (%s)", err, known[0].Member())
	}
	if n != len(fine) {
		t.Errorf("Move = %d, want %d: one queue's failure stopped the mover for the queues after it", n, len(fine))
	}
	for _, qk := range fine {
		if w := e.waiting(t, qk); !reflect.DeepEqual(w, []string{"t-" + qk.Ref.Name}) {
			t.Errorf("%s waiting = %v, want its due task", qk.Ref.Name, w)
		}
	}
}

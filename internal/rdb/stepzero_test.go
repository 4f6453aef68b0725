package rdb_test

import (
	"errors"
	"io"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A client that took the first step's reply for lost closes the batch's
// guard and reads how far it got: a first step still on its way must then
// be refused, or it would apply after the client said it had not.
func TestStepZeroAfterTheGuardClosedIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	guard := e.q.StepsPrefix + "b1"
	if last, ok := e.st.StepsApplied(e.ctx, e.q, guard, io.ErrUnexpectedEOF); !ok || last != -1 {
		t.Fatalf("StepsApplied = %d, %v; want -1 (no step applied)", last, ok)
	}
	_, err := e.st.EnqueueKeyStep(e.ctx, e.q, "k", []string{"a1"}, [][]byte{[]byte("p")}, nil, nil,
		&rdb.StepGuard{Key: guard, Step: 0})
	if !errors.Is(err, rdb.ErrStepRefused) {
		t.Fatalf("step 0 after the close: %v; want ErrStepRefused", err)
	}
	if n, err := redis.Int(e.c.Do("EXISTS", e.q.Task("a1"))); err != nil || n != 0 {
		t.Fatalf("the refused step wrote its task (%d, %v)", n, err)
	}
	// Without a closed guard, step 0 applies and opens it.
	g2 := e.q.StepsPrefix + "b2"
	if _, err := e.st.EnqueueKeyStep(e.ctx, e.q, "k", []string{"a2"}, [][]byte{[]byte("p")}, nil, nil,
		&rdb.StepGuard{Key: g2, Step: 0}); err != nil {
		t.Fatal(err)
	}
	if last, ok := e.st.StepsApplied(e.ctx, e.q, g2, io.ErrUnexpectedEOF); !ok || last != 0 {
		t.Fatalf("StepsApplied after step 0 = %d, %v; want 0", last, ok)
	}
}

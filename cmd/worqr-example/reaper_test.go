package main

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// TestReaper kills a worker process while it holds a task; with no other
// worker up, only the stand-alone reaper can put the task back: its line
// names the dead worker, and the task is waiting again after one crash.
func TestReaper(t *testing.T) {
	h := startHolder(t)
	url, ns, ce, child, childID, id := h.url, h.ns, h.ce, h.child, h.childID, h.id

	lr := startReaper(t, url, ns, ce)
	if f := lr.next(t, "reaping "); len(f) != 2 {
		t.Fatalf("bad reaping line %v", f)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if f := lr.next(t, "recovered "); strings.Join(f, " ") != "recovered held 1 "+childID {
		t.Fatalf("reaper: %q, want recovered held 1 %s", f, childID)
	}
	if m := taskFields(t, ce, "held", id); m["state"] != "queued" || m["crashes"] != "1" {
		t.Fatalf("task after the reaper: %v, want queued after 1 crash", m)
	}
	// Published, as a worker's reaper publishes: the history counts it.
	if got := historyOf(t, url, ns, "held"); got.Recovered != 1 {
		t.Fatalf("history of held after the reaper: %+v, want 1 recovered", got)
	}
}

// A task whose cancel was asked while its worker was frozen, and which that
// worker never ended (killed), is ended as cancelled by the stand-alone
// reaper, which says so.
func TestReaperEndsACancelledTaking(t *testing.T) {
	h := startHolder(t)
	url, ns, ce, child, id := h.url, h.ns, h.ce, h.child, h.id
	// Frozen, the worker cannot hear the cancel; killed, it never ends it.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pool, err := redisconn.NewPool(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := client.Cancel(context.Background(), "held", id); err != nil || st != worqr.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", st, err)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	lr := startReaper(t, url, ns, ce)
	if f := lr.next(t, "cancelled "); strings.Join(f, " ") != "cancelled held "+id {
		t.Fatalf("reaper: %q, want cancelled held %s", f, id)
	}
	if got := historyOf(t, url, ns, "held"); got.Cancelled != 1 || got.Recovered != 0 {
		t.Fatalf("history of held after the reaper: %+v, want 1 cancelled, none recovered", got)
	}
}

// historyOf waits (10 s at most) until queue's history of the last two
// minutes counts something recovered or cancelled, and returns its sums:
// the reaper publishes its passes at its next event interval.
func historyOf(t *testing.T, url, ns, queue string) worqr.Throughput {
	t.Helper()
	pool, err := redisconn.NewPool(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatalf("History: %v", err)
		}
		var sum worqr.Throughput
		for _, m := range ms {
			sum.Recovered += m.Recovered
			sum.Cancelled += m.Cancelled
		}
		if sum.Recovered+sum.Cancelled > 0 {
			return sum
		}
		select {
		case <-ctx.Done():
			t.Fatalf("history of %s: nothing recovered or cancelled after 10 s", queue)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startReaper runs the reaper command until the test ends and returns the
// reader of its lines.
func startReaper(t *testing.T, url, ns string, ce env) *lineReader {
	t.Helper()
	lr := newLineReader()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"reaper", "--redis-url", url, "--namespace", ns}, stdio{out: lr.w, err: &errb, getenv: ce.get})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("reaper exit code %d; stderr:\n%s", code, errb.String())
		}
		lr.w.Close()
	})
	return lr
}

// holder is a worker process (child) that holds task id of queue held,
// on an embedded Redis at url under namespace ns; ce is the environment of
// the commands run beside it.
type holder struct {
	url, ns, childID, id string
	ce                   env
	child                *exec.Cmd
}

// startHolder starts a worker whose handler works for a minute and gives
// it one task to hold.
func startHolder(t *testing.T) holder {
	t.Helper()
	url := startMiniredis(t)
	ns := "t-" + t.Name()
	e := env{envHeartbeatInterval: "200ms", envHeartbeatTTL: "1s", envReaperInterval: "300ms", envPollInterval: "200ms"}
	ce := env{envRedisURL: url, envNamespace: ns, envReaperInterval: "300ms"}
	child, clr := startChildWorker(t, e, url, ns, "--queues", "held", "--work-time", "1m")
	childID := clr.next(t, "registered ")[1]
	code, stdout, stderr := runArgs(t, ce, "enqueue", "--queue", "held", "--payload", "x")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	id := strings.Fields(stdout)[2]
	clr.next(t, "took ")
	return holder{url: url, ns: ns, childID: childID, id: id, ce: ce, child: child}
}

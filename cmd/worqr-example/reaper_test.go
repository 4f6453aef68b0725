package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
)

// TestReaper kills a worker process while it holds a task; with no other
// worker up, only the stand-alone reaper can put the task back: its line
// names the dead worker, and the task is waiting again after one crash.
func TestReaper(t *testing.T) {
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
}

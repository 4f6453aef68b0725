package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/worqr"
)

var errRefused = errors.New("injected: the connection broke before the call was sent")

// An end that failed with a connection error is sent again; if the taking
// is then gone, the worker must tell whether its first attempt was applied
// (its reply lost) or a reaper requeued the taking meanwhile: only while
// the worker's keepalive lives can nobody else have moved it (appliedBefore).
// Here the first attempt was never sent, and the keepalive expired and a
// reaper pass requeued the taking before the retry: the outcome is a lost
// taking, not a done one (the task was not done: it runs again).
func TestEndRetriedAfterAReaperRequeuedIsLost(t *testing.T) {
	base := srv.Pool()
	defer base.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	keys := rdb.NewKeys(cfg.Namespace)
	reaper, err := recovery.New(base, &recovery.Config{Namespace: cfg.Namespace, Interval: recovery.MinInterval})
	if err != nil {
		t.Fatal(err)
	}
	var worker atomic.Value // the worker's id
	var refused atomic.Bool
	var hookErr error
	pool := &hookPool{pool: base, refuse: func(cmd string, args []any) error {
		if (cmd != "EVALSHA" && cmd != "FCALL") || len(args) < 3 || !strings.HasSuffix(fmt.Sprint(args[2]), ":s:q") {
			return nil
		}
		done := false
		for _, a := range args[3:] {
			if s, ok := a.(string); ok && s == string(rdb.AskDone) {
				done = true
			}
		}
		if !done || !refused.CompareAndSwap(false, true) {
			return nil
		}
		// Before the retry: the keepalive expires and a reaper pass
		// requeues what the worker held.
		c := base.Get()
		defer c.Close()
		id, _ := worker.Load().(string)
		if _, err := c.Do("DEL", keys.Keepalive(id)); err != nil {
			hookErr = err
		} else if _, err := reaper.Pass(context.Background()); err != nil {
			hookErr = err
		}
		return errRefused
	}}
	var mu sync.Mutex
	var outcomes []worqr.Event
	ran := make(chan string, 4)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
		OnEvent: func(e worqr.Event) {
			switch e.Kind {
			case worqr.EventDone, worqr.EventLost:
				mu.Lock()
				outcomes = append(outcomes, e)
				mu.Unlock()
			}
		},
		// A beat that finds the keepalive gone comes well after the retry.
		HeartbeatInterval: 2 * time.Second, HeartbeatTTL: 6 * time.Second, PollInterval: time.Second,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			ran <- t.PID()
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	worker.Store(w.ID())
	client, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &cfg)
	id, err := client.Enqueue(context.Background(), "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	select {
	case first = <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the task never ran")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		var got *worqr.Event
		for i := range outcomes {
			if outcomes[i].TaskID == id && outcomes[i].PID == first {
				got = &outcomes[i]
			}
		}
		mu.Unlock()
		if got != nil {
			if got.Kind != worqr.EventLost {
				info, _ := in.Task(context.Background(), "q", id)
				t.Fatalf("the end of pid %s, retried after a reaper requeued the taking, reported %s (task now %+v); want lost",
					first, got.Kind, info)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no outcome for the first taking (pid %s); events %+v", first, outcomes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !refused.Load() {
		t.Fatal("no end was refused: the test tested nothing")
	}
}

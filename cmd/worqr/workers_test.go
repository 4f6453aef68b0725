package main

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

func TestWorkersLs(t *testing.T) {
	b := setup(t)
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"emails": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return nil })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	out := b.ok("", "workers", "ls", "-o", "json")
	var ws []workerJSON
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !ws[0].Alive || !reflect.DeepEqual(ws[0].Queues, []string{"emails"}) || ws[0].PID != os.Getpid() {
		t.Errorf("got %+v", ws)
	}
	if table := b.ok("", "workers", "ls"); !strings.Contains(table, "WORKER") || !strings.Contains(table, "emails") {
		t.Errorf("table:\n%s", table)
	}
}

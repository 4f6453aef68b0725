package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// flow ls lists the flows Redis knows, with their queues, counts and
// newest run, and nothing of the stand-alone queues.
func TestFlowLs(t *testing.T) {
	b := setup(t)
	if out := b.ok("", "flow", "ls"); out != `no flows in namespace "`+b.ns+`"`+"\n" {
		t.Errorf("flow ls of an empty namespace printed %q", out)
	}
	b.enqueue("emails", "a")
	flow := &worqr.Flow{Name: "signup", Stages: []worqr.Stage{
		{Name: "check", Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 1, Handler: worqr.HandlerFunc(
				func(context.Context, *worqr.Task) error { return nil })}},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{}, nil
			})},
		{Name: "finish", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })},
	}}
	// No worker serves it: the run waits in its first stage.
	id, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var flows []flowJSON
	out := b.ok("", "flow", "ls", "-o", "json")
	if err := json.Unmarshal([]byte(out), &flows); err != nil {
		t.Fatalf("flow ls -o json: %v\n%s", err, out)
	}
	if len(flows) != 1 || flows[0].Flow != "signup" || flows[0].Waiting != 1 || flows[0].NewestRun == nil ||
		flows[0].NewestRun.ID != id || flows[0].NewestRun.Stage != "check" || flows[0].NewestRun.Status != "running" {
		t.Fatalf("flow ls -o json: %s", out)
	}
	if names := queueNames(flows[0].Queues); !strings.Contains(names, "signup/check") {
		t.Errorf("the queues of signup are %s; want signup/check among them", names)
	}
	table := b.ok("", "flow", "ls")
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "FLOW") || !strings.HasPrefix(lines[1], "signup ") ||
		!strings.Contains(lines[1], "check") || !strings.Contains(lines[1], "running at check") {
		t.Errorf("flow ls:\n%s", table)
	}
}

func queueNames(qs []queueStats) string {
	var s []string
	for _, q := range qs {
		s = append(s, q.Name)
	}
	return strings.Join(s, ",")
}

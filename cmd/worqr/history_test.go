package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

// TestHistoryReadsWhatOtherProcessesCounted: the CLI, a process that saw
// none of it, prints the throughput the test's client and worker counted:
// per queue (queue history) and for every queue (stats --history), as JSON
// and as a table with a total row.
func TestHistoryReadsWhatOtherProcessesCounted(t *testing.T) {
	b := setup(t)
	b.enqueue("sms", "x")
	b.bury("emails", "boom", "bang")
	var hs []historyJSON
	redistest.WaitFor(b.t, patience, "the history of emails", func() bool {
		out := b.ok("", "queue", "history", "emails", "--minutes", "3", "-o", "json")
		hs = nil
		if err := json.Unmarshal([]byte(out), &hs); err != nil {
			t.Fatalf("queue history -o json: %v\n%s", err, out)
		}
		var enq, dead int64
		for _, h := range hs {
			enq, dead = enq+h.Enqueued, dead+h.Dead
		}
		return enq == 2 && dead == 2
	})
	if len(hs) != 3 || hs[0].Queues != nil {
		t.Errorf("3 minutes of one queue, without a per-queue breakdown: %+v", hs)
	}
	out := b.ok("", "stats", "--history", "--minutes", "5", "-o", "json")
	if err := json.Unmarshal([]byte(out), &hs); err != nil || len(hs) != 5 {
		t.Fatalf("stats --history -o json: %v\n%s", err, out)
	}
	var all, sms int64
	for _, h := range hs {
		all += h.Enqueued
		sms += h.Queues["sms"].Enqueued
	}
	if all != 3 || sms != 1 {
		t.Errorf("stats --history: %d enqueued (sms %d), want 3 (sms 1)\n%s", all, sms, out)
	}
	table := b.ok("", "stats", "--history", "--minutes", "2")
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "MINUTE") || strings.Join(strings.Fields(lines[3]), " ") != "total 3 0 0 2 0 0 0" {
		t.Errorf("stats --history table: want a header, 2 minutes and the total 3 enqueued 2 dead:\n%s", table)
	}
}

package prometheus_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// One label names the queue on every metric, so that the gauges read at
// scrape time and the counters and histograms of the events join by it
// (rate(messaging_client_sent_messages_total[5m]) / worqr_queue_waiting):
// the messaging_* metrics named it messaging_destination_name, the
// worqr_* ones queue.
func TestOneLabelNamesTheQueue(t *testing.T) {
	e := setup(t)
	c, reg := register(t, e.in, nil)
	e.run(c, reg)
	e.worker(map[string]worqr.QueueConfig{"labelled": {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}})
	e.enqueue("labelled", nil)
	families := []string{"worqr_queue_waiting", "worqr_task_wait_seconds", "messaging_client_sent_messages_total",
		"messaging_client_consumed_messages_total", "messaging_process_duration_seconds"}
	redistest.Eventually(t, 15*time.Second, func() string {
		mfs := gather(t, reg)
		for _, name := range families {
			found := false
			for _, mf := range mfs {
				found = found || mf.GetName() == name && len(mf.GetMetric()) > 0
			}
			if !found {
				return name + " has no series yet"
			}
		}
		return ""
	})
	seen := map[string]bool{}
	var wrong []string
	for _, mf := range gather(t, reg) {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() != "labelled" {
					continue
				}
				if lp.GetName() != "queue" {
					wrong = append(wrong, mf.GetName()+"{"+lp.GetName()+"}")
				} else {
					seen[mf.GetName()] = true
				}
			}
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Errorf("the queue is labelled other than queue on %s", strings.Join(wrong, ", "))
	}
	for _, name := range families {
		if !seen[name] {
			t.Errorf("%s does not name the queue with the label queue", name)
		}
	}
}

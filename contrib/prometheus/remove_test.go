package prometheus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// seriesOf returns the families that have a series labelled queue=name.
func seriesOf(t *testing.T, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	var out []string
	for _, mf := range gather(t, reg) {
		for _, m := range mf.GetMetric() {
			if hasLabels(m, []string{"queue", name}) {
				out = append(out, mf.GetName())
				break
			}
		}
	}
	return out
}

// A queue removed with Inspector.RemoveQueue stops being exported: its
// gauges (read from the known queues) and the series its events made
// (counters and histograms kept by Run) are gone from the next scrape on;
// another queue's stay.
func TestRemovedQueueIsNotExported(t *testing.T) {
	e := setup(t)
	c, reg := register(t, e.in, nil)
	e.run(c, reg)
	ok := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })
	w := e.worker(map[string]worqr.QueueConfig{"gone": {Concurrency: 1, Handler: ok}, "kept": {Concurrency: 1, Handler: ok}})
	e.enqueue("gone", nil)
	e.enqueue("kept", nil)
	families := []string{"worqr_queue_waiting", "worqr_task_wait_seconds", "messaging_client_sent_messages_total",
		"messaging_client_consumed_messages_total", "messaging_process_duration_seconds"}
	redistest.Eventually(t, 15*time.Second, func() string {
		for _, q := range []string{"gone", "kept"} {
			if got := strings.Join(seriesOf(t, reg, q), " "); len(seriesOf(t, reg, q)) < len(families) {
				return q + " has only the series " + got
			}
		}
		return ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.in.RemoveQueue(context.Background(), "gone", nil); err != nil {
		t.Fatal(err)
	}
	if got := seriesOf(t, reg, "gone"); len(got) > 0 {
		t.Errorf("the removed queue is still exported in %v", got)
	}
	if got := seriesOf(t, reg, "kept"); len(got) < len(families) {
		t.Errorf("the other queue lost series: it has %v", got)
	}
}

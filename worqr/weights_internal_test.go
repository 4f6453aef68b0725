package worqr

import (
	"math"
	"testing"
)

// The weights of queues served by priority are added up for each draw
// (prioGroup.share): weights whose sum passes the largest int made it
// negative, the draw gave no slot to any queue, and the worker, accepted
// by NewWorker, ran nothing at all, with no error or log (Weight had no
// upper bound). With PriorityWeighted they are refused now; a sum of
// exactly math.MaxInt is served. (PriorityStrict only ranks the weights.)
func TestWeightsWhoseSumOverflowsAreRefused(t *testing.T) {
	t.Parallel()
	edit := func(mode PriorityMode, wa, wb int) *WorkerConfig {
		return worker(func(c *WorkerConfig) {
			c.Priority, c.Concurrency = mode, 4
			c.Queues = map[string]QueueConfig{"a": {Handler: noop, Weight: wa}, "b": {Handler: noop, Weight: wb}}
		})
	}
	_, err := edit(PriorityWeighted, math.MaxInt, 1).withDefaults()
	want := `worqr: Queues (their Weight, 1 for a queue without one) must add up to at most 9223372036854775807 with PriorityWeighted`
	if err == nil || err.Error() != want {
		t.Errorf("weights MaxInt and 1: err = %v, want %q", err, want)
	}
	for _, c := range []*WorkerConfig{edit(PriorityWeighted, math.MaxInt-1, 0), edit(PriorityStrict, math.MaxInt, math.MaxInt)} {
		if _, err := c.withDefaults(); err != nil {
			t.Errorf("%s, weights %d and %d: %v", c.Priority, c.Queues["a"].Weight, c.Queues["b"].Weight, err)
		}
	}

	// The draw with the largest sum allowed gives every slot.
	a := &queueRunner{name: "a", weight: math.MaxInt - 1, concurrency: 4, slots: &slotPool{size: 4}}
	b := &queueRunner{name: "b", weight: 1, concurrency: 4, slots: a.slots}
	g := newPrioGroup(PriorityWeighted, 4)
	if got := g.share([]*queueRunner{a, b}, 4, 0, nil); got[0]+got[1] != 4 {
		t.Errorf("share of 4 slots between weights MaxInt-1 and 1 = %v, want all 4 given", got)
	}
}

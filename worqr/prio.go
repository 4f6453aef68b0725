package worqr

import (
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// prioGroup is the stand-alone queues of a worker served by priority
// (WorkerConfig.Priority): they share one pool of slots, one wake channel
// and one fetch loop (groupLoop), which gives each free slot to a queue
// with waiting work, drawn by weight or in order of weight. Each queue
// keeps its own takes, ends, releases and handler goroutines: a take is
// still the take of one queue, so nothing changes in Redis.
type prioGroup struct {
	mode   PriorityMode
	slots  *slotPool
	queues []*queueRunner // by weight, highest first (then by name)
	wake   chan struct{}  // cap 1: some queue of the group may have work
	freed  chan struct{}  // cap 1: a slot was freed

	// owed counts, per queue (g.queues order), the slots an end's draw gave
	// to that queue while another queue's takings ended (refillShare): the
	// loop gives them to it first once they are free, so that an end
	// taking again for its own queue does not bias the shares.
	mu   sync.Mutex
	owed map[*queueRunner]int
}

func newPrioGroup(mode PriorityMode, size int) *prioGroup {
	return &prioGroup{mode: mode, slots: &slotPool{size: size},
		wake: make(chan struct{}, 1), freed: make(chan struct{}, 1), owed: map[*queueRunner]int{}}
}

func (g *prioGroup) sortQueues() {
	sort.SliceStable(g.queues, func(i, j int) bool { return g.queues[i].weight > g.queues[j].weight })
}

// candidates are the queues a free slot may go to now: not paused, not held
// by their limits, with a free slot of their own, and maybe holding waiting
// work (their last take filled what it asked, or a wake-up or poll came
// since). In g.queues order. extra slots are about to be freed (the
// handlers of ending takings still hold them): they count as free.
func (g *prioGroup) candidates(extra int) []*queueRunner {
	var out []*queueRunner
	for _, q := range g.queues {
		if q.Paused.Load() || !q.more.Load() || q.free()+extra == 0 {
			continue
		}
		if limited, _ := q.limitedNow(); limited {
			continue
		}
		out = append(out, q)
	}
	return out
}

// share gives n free slots to the candidates: strict, all to the first (up
// to its own free slots, the rest to the next); weighted, each slot to a
// queue drawn with probability proportional to its weight (a queue whose
// own free slots are used up leaves the draw). given, when not nil, is
// what each candidate already has of this round (what it was owed): its
// room is what is left of its free slots.
func (g *prioGroup) share(cands []*queueRunner, n, extra int, given []int) []int {
	out := make([]int, len(cands))
	room := make([]int, len(cands))
	for i, q := range cands {
		room[i] = q.free() + extra
		if given != nil {
			room[i] = max(0, room[i]-given[i])
		}
	}
	if g.mode == PriorityStrict {
		for i := range cands {
			k := min(n, room[i])
			out[i], n = k, n-k
		}
		return out
	}
	total := 0
	for i, q := range cands {
		if room[i] > 0 {
			total += q.weight
		}
	}
	for ; n > 0 && total > 0; n-- {
		r := rand.IntN(total)
		for i, q := range cands {
			if room[i] <= 0 {
				continue
			}
			if r < q.weight {
				out[i]++
				if room[i]--; room[i] == 0 {
					total -= q.weight
				}
				break
			}
			r -= q.weight
		}
	}
	return out
}

// refillShare is how many of the n slots freed by ends of q the end takes
// again from q itself: the slots the priority rule gives to q (the others
// are left free, and the group's loop gives them out when the handlers
// return). Without a group: all n.
func (w *Worker) refillShare(q *queueRunner, n int) int {
	g := w.group
	if g == nil || q.weight == 0 {
		return n
	}
	// The ending handlers still hold their slots: count them free.
	cands := g.candidates(n)
	if len(cands) == 0 {
		return 0
	}
	own := 0
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, k := range g.share(cands, n, n, nil) {
		if cands[i] == q {
			own = k
		} else if k > 0 {
			g.owed[cands[i]] += k
		}
	}
	return own
}

// groupLoop takes for the queues of g: while slots are free and some queue
// may have work, it shares the free slots (share) and takes from each queue
// its part; a queue whose take came back short has no more work until a
// wake-up or a poll says otherwise.
func (w *Worker) groupLoop(g *prioGroup) {
	defer w.loops.Done()
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	lift := time.NewTimer(time.Hour)
	lift.Stop()
	defer lift.Stop()
	delay := 50 * time.Millisecond
	for {
		if stopping(w.takeStop) {
			// (A round that took, or a freed slot picked by the select
			// below when Stop had begun too, leads here: no more takes.)
			return
		}
		s, changed := w.keeper.Current()
		ready := !s.Lost() && w.keeper.Fresh()
		var err error
		again := false
		if ready {
			again, err = w.groupRound(s, g)
		}
		if errors.Is(err, rdb.ErrExpired) {
			if !engine.Sleep(w.takeCtx, w.cfg.HeartbeatInterval/4) {
				return
			}
			continue
		}
		if err != nil {
			if w.runCtx.Err() != nil {
				return
			}
			w.emit(Event{Kind: EventError, WorkerID: s.ID(), Err: err})
			w.cfg.Logger.Warn("worker: take failed", "err", err)
			if !engine.Sleep(w.takeCtx, delay) {
				return
			}
			delay = min(delay*2, 5*time.Second)
			continue
		}
		delay = 50 * time.Millisecond
		if again {
			continue
		}
		var next time.Time
		for _, q := range g.queues {
			if limited, until := q.limitedNow(); limited && !until.IsZero() && (next.IsZero() || until.Before(next)) {
				next = until
			}
		}
		if !next.IsZero() {
			lift.Reset(time.Until(next))
		}
		select {
		case <-w.takeStop:
			return
		case <-g.wake:
		case <-g.freed:
		case <-poll.C:
			for _, q := range g.queues {
				q.more.Store(true)
				q.ConcWait.Store(false)
			}
		case <-lift.C:
		case <-changed:
			for _, q := range g.queues {
				q.more.Store(true)
			}
		}
	}
}

// groupRound releases what lost take replies may have left held, then
// takes once from each queue that share gives slots to. It reports whether
// another round should follow at once (every take filled its part, or one
// buried something).
func (w *Worker) groupRound(s *heartbeat.Session, g *prioGroup) (bool, error) {
	for _, q := range g.queues {
		if q.unsureFor(s.ID()) == "" {
			continue
		}
		if err := w.release(s, q); err != nil {
			return false, err
		}
	}
	free := g.slots.size - int(g.slots.busy.Load())
	if free <= 0 {
		return false, nil
	}
	cands := g.candidates(0)
	if len(cands) == 0 {
		return false, nil
	}
	plan := make([]int, len(cands))
	g.mu.Lock()
	in := map[*queueRunner]bool{}
	for i, q := range cands {
		in[q] = true
		k := min(g.owed[q], free, q.free())
		plan[i], free = k, free-k
		if g.owed[q] -= k; g.owed[q] <= 0 {
			delete(g.owed, q)
		}
	}
	for q := range g.owed {
		if !in[q] {
			delete(g.owed, q) // no work, paused or limited: drawn again later
		}
	}
	g.mu.Unlock()
	for i, k := range g.share(cands, free, 0, plan) {
		plan[i] += k
	}
	again := false
	for i, n := range plan {
		if n == 0 {
			continue
		}
		q := cands[i]
		hints := q.hints.Load()
		tasks, wait, err := w.take(s, q, n)
		err = w.takeReplicated(s, q, err)
		if err != nil {
			if !errors.Is(err, rdb.ErrExpired) {
				// The take may have run with its reply lost: release
				// before taking from q again.
				q.setUnsure(s.ID())
			}
			return false, err
		}
		q.limitWait(wait, hints)
		q.tookShort(heads(tasks) == n && wait == 0, hints)
		// Another round at once when every taking was launched or buried
		// (slots were filled, or q leaves the draw having come back
		// short), not when some were left to the reaper or to Stop.
		if launched, buried := w.launch(s, q, tasks, launchAny); launched+buried == heads(tasks) {
			again = true
		}
	}
	return again, nil
}

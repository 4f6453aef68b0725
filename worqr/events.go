package worqr

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/eventbus"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/seam"
)

// toWire is e as published: its error cut to engine.MaxErrorLen bytes, as
// the task's stored error is (OnEvent gets it whole).
func toWire(e Event) eventbus.Wire {
	w := eventbus.Wire{Kind: string(e.Kind), At: e.At.UnixMilli(), WorkerID: e.WorkerID, Queue: e.Queue, TaskID: e.TaskID,
		PID: e.PID, Count: e.Count, DeadWorkers: e.DeadWorkers, RunningMs: e.Running.Milliseconds()}
	if e.Err != nil {
		w.Err = engine.Clip(e.Err.Error())
	}
	return w
}

// fromWire is the Event w carries.
func fromWire(w eventbus.Wire) Event {
	e := Event{Kind: EventKind(w.Kind), At: time.UnixMilli(w.At), WorkerID: w.WorkerID, Queue: w.Queue, TaskID: w.TaskID,
		PID: w.PID, Count: w.Count, DeadWorkers: w.DeadWorkers, Running: time.Duration(w.RunningMs) * time.Millisecond}
	if w.Err != "" {
		e.Err = errors.New(w.Err)
	}
	return e
}

// eventBus publishes the events of a process (internal/eventbus) and
// adds up the history counters they count in; nil when events are off.
type eventBus struct{ b *eventbus.Bus }

// newEventBus returns the bus of a process, or nil when cfg disables events.
func newEventBus(st *rdb.Store, cfg Config) *eventBus {
	if cfg.DisableEvents {
		return nil
	}
	return &eventBus{eventbus.New(st, cfg.EventInterval, cfg.EventLogLength, cfg.Logger, string(EventDropped))}
}

// add queues e for the next publication. A recovery that requeued nothing
// (its takings were all cancelled) counts nothing in the history.
func (b *eventBus) add(e Event) {
	if b == nil {
		return
	}
	outcome := historyOutcome(e.Kind)
	if e.Kind == EventRecovered && e.Count == 0 {
		outcome = ""
	}
	b.b.Add(toWire(e), outcome)
}

// flush publishes what is buffered.
func (b *eventBus) flush() {
	if b != nil {
		b.b.Flush()
	}
}

// decodeBatch decodes one published batch.
func decodeBatch(data []byte) ([]Event, error) {
	ws, err := eventbus.Decode(data)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(ws))
	for i, w := range ws {
		out[i] = fromWire(w)
	}
	return out, nil
}

// Follow calls fn for every event any process of the namespace publishes
// (workers: started, done, retry, dead, given back, cancelled, recovered...;
// clients: enqueued, cancelled; inspectors: paused, resumed), in the order
// each process observed them, until ctx ends; then it returns nil. Events
// arrive in batches, at most one per process per Config.EventInterval. It
// holds one connection and resubscribes after a connection failure; what
// was published meanwhile is missed (see RecentEvents). fn runs on Follow's
// goroutine and should return quickly.
func (in *Inspector) Follow(ctx context.Context, fn func(Event)) error {
	follow(ctx, in.st, in.cfg.Logger, nil, nil, nil, fn)
	return nil
}

// follow delivers the namespace's events to fn until ctx ends,
// resubscribing after a failure; onReady (when set) runs after each
// subscription is confirmed, onDown (when set) after each one ended. It
// listens to channels too (queues' ended channels, see Client.Wait), whose
// messages it hands to fn as the end events they say.
func follow(ctx context.Context, st *rdb.Store, logger *slog.Logger, channels []string, onReady, onDown func(), fn func(Event)) {
	delay := 50 * time.Millisecond
	events := st.EventsChannel()
	for ctx.Err() == nil {
		err := st.Listen(ctx, append([]string{events}, channels...), func() {
			delay = 50 * time.Millisecond
			if onReady != nil {
				onReady()
			}
		}, func(channel string, data []byte) {
			if channel != events {
				if e, ok := endedEvent(st, channel, data); ok {
					fn(e)
				}
				return
			}
			events, err := decodeBatch(data)
			if err != nil {
				logger.Warn("worqr: undecodable event batch", "err", err)
				return
			}
			for _, e := range events {
				fn(e)
			}
		})
		if onDown != nil {
			onDown()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			logger.Warn("worqr: following events failed, resubscribing", "err", err)
		}
		if !engine.Sleep(ctx, delay) {
			return
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// endedEvent reads a message of a queue's ended channel ("<state> <id>",
// published by the end of a task a Wait marked) as the end event of that
// task.
func endedEvent(st *rdb.Store, channel string, data []byte) (Event, bool) {
	state, id, ok := strings.Cut(string(data), " ")
	ref, known := st.EndedQueue(channel)
	if !ok || !known {
		return Event{}, false
	}
	for k, s := range endState {
		if string(s) == state {
			return Event{Kind: k, At: time.Now(), Queue: ref.Member(), TaskID: id}, true
		}
	}
	return Event{}, false
}

// waitRecheck is how often Client.Wait and Client.WaitRun read what they
// wait for again when no event woke them.
const waitRecheck = 5 * time.Second

// Wait blocks until task id of queue has ended (done, cancelled, expired
// or dead) and returns what Task reads then: its state, and for a done task
// the result its handler set. Wait marks the task (one script call, until
// the task has a hash), and the worker's end of a marked task (done, dead,
// cancelled by its handler's run, expired) publishes it on the queue's
// ended channel in the same call: Wait returns as soon as it is recorded.
// Other ends (a cancel of a waiting task, the reaper's, a task of a flow or
// of a key's batch) wake it through the events the processes publish (at
// most one Config.EventInterval late). Every Wait and WaitRun running on a
// Client shares one subscription to the events and to the waited queues'
// ended channels: it takes one connection of the pool (on a Redis Cluster,
// of the node that serves the registry's slot, and one connection per
// master that serves a waited queue, dialed outside the pool) from the
// first Wait on, and gives it back once the last one has returned; a Wait
// on a queue it does not listen to yet makes it again (every Wait reads
// again). Their reads take a connection each, a few at a time (at
// most 8; with redisconn.Options.MaxActive set, at most half of the other
// connections, and at least 1): the Waits never take more than that and
// the subscription's, and any number of them run on a pool that allows 2
// connections or more. Wait reads the task once the subscription
// is active, so an end after that read is heard; after a failure the
// subscription is made again and every Wait reads its task again, since
// the events published meanwhile are lost. Events are best effort (the
// process that ended the task may be killed before it publishes), so Wait
// also reads the task again every 5 s: a lost event delays it,
// never hangs it. A read that fails is tried again after a short backoff
// (logged; 50 ms doubling to 5 s). A done, cancelled or expired
// task is readable only while its retention (its EnqueueOpts.Retention, or
// its queue's Retention; 24 h for a done task with a result when neither is
// set) keeps it: for one that ended without retention, Wait returns what
// the event of its end said (its State, no result) when it saw that event. A task not found is waited for 2 × Config.EventInterval
// + 1s more (its end's event may be on its way), then Wait returns
// ErrTaskNotFound: the task ended before Wait began with no retention, or
// its event was lost, or it never existed. It returns ctx's error when ctx
// ends first. The workers must publish events (Config.DisableEvents unset).
func (c *Client) Wait(ctx context.Context, queue, id string) (*TaskInfo, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, invalid("id", "is empty")
	}
	var info *TaskInfo
	var seen atomic.Pointer[TaskState] // how its end's event said it ended
	// A task read as gone may have ended after Wait was called, its event
	// not yet published (a process publishes at most every EventInterval):
	// Wait waits that long, and some, for the event before it says
	// ErrTaskNotFound.
	var gone time.Time
	grace := 2*c.cfg.EventInterval + time.Second
	marked := false
	err = c.waitUntil(ctx, id, qk.EndedChannel, func(e Event) bool {
		if e.TaskID != id {
			return false
		}
		switch e.Kind {
		case EventDone, EventCancelled, EventDead, EventExpired:
			if e.Queue == queue {
				st := endState[e.Kind]
				seen.Store(&st)
			}
			return true
		}
		return false
	}, func(ctx context.Context) (bool, error) {
		if !marked {
			// Before the read, once the ended channel is listened to: an
			// end after the mark is published there, one before it is
			// read. Until the task has a hash (a bulk-loaded task not yet
			// taken; an id not enqueued yet), the events wake this Wait.
			ok, err := c.st.MarkWaited(ctx, qk, id)
			if err != nil {
				return false, err
			}
			marked = ok
		}
		var err error
		if info, err = c.task(ctx, queue, id); err != nil {
			if st := seen.Load(); st != nil && errors.Is(err, ErrTaskNotFound) {
				// Ended with no retention to keep it: what its event said.
				info = &TaskInfo{ID: id, Queue: queue, State: *st}
				return true, nil
			}
			if errors.Is(err, ErrTaskNotFound) {
				if gone.IsZero() {
					gone = time.Now()
				}
				if left := grace - time.Since(gone); left > 0 {
					return false, &waitGraceError{d: left}
				}
			}
			return false, err
		}
		switch info.State {
		case StateDone, StateCancelled, StateDead, StateExpired:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// waitGraceError is what Wait's read says of a task not found while the
// event of its end may still be on its way: read again after d.
type waitGraceError struct{ d time.Duration }

func (e *waitGraceError) Error() string { return "worqr: wait: task not found yet" }

// endState is the state a task's end event says it ended in.
var endState = map[EventKind]TaskState{EventDone: StateDone, EventCancelled: StateCancelled,
	EventDead: StateDead, EventExpired: StateExpired}

// WaitRun blocks until run id of flow has ended (done, failed or
// cancelled) and returns what Inspector.Run reads then: its status, its
// state and its children's results. It is woken as Wait is, through the
// same shared subscription: by the events of the run's stage and
// children, and by a read every 5 s. A run is readable only
// while the flow's Retention keeps it once ended, so WaitRun returns
// ErrTaskNotFound for a run that ended longer ago (or never existed). It
// returns ctx's error when ctx ends first.
func (c *Client) WaitRun(ctx context.Context, flow *Flow, id string) (*RunInfo, error) {
	if err := checkRunRef(flow, id); err != nil {
		return nil, err
	}
	// A run ends by the end of its stage (its events carry the run's id)
	// or of one of its children (ids "<run id>.<xid>"): a last child done,
	// a child dead with fail-fast.
	children := id + "."
	var info *RunInfo
	err := c.waitUntil(ctx, id, "", func(e Event) bool {
		switch e.Kind {
		case EventDone, EventCancelled, EventDead, EventExpired, EventForwarded, EventFannedOut:
			return e.TaskID == id || strings.HasPrefix(e.TaskID, children)
		}
		return false
	}, func(ctx context.Context) (bool, error) {
		var err error
		if info, err = c.run(ctx, flow, id); err != nil {
			return false, err
		}
		return info.Status != RunRunning, nil
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// waitUntil registers a wait for id with the Client's shared events
// subscription (waitHub) and calls ended once the subscription is active
// (what ended before is in Redis by then), after each event about id that
// wake accepts, after each resubscribe (what ended while the subscription
// was down was not heard), and every waitRecheck (an event may be lost),
// until ended reports true, or fails with ErrTaskNotFound or ErrInvalid, or
// ctx ends. Each read is bounded by waitRecheck (it holds a token of the
// Client's read gate, which the other waits need too). Any other failure
// (Redis unreachable for a while, a failover, a pool with no connection
// left) is logged and the wait goes on: ended runs again after a short
// backoff (50 ms doubling to waitRecheck), or at the next wake-up or
// recheck if sooner.
func (c *Client) waitUntil(ctx context.Context, id, channel string, wake func(Event) bool, ended func(context.Context) (bool, error)) error {
	w := &eventbus.Waiter[Event]{ID: id, Channel: channel, Wake: wake, Woken: make(chan struct{}, 1)}
	c.waits.Add(w)
	defer c.waits.Remove(w)
	var recheck <-chan time.Time
	if clk := seam.HeartbeatClock(ctx); clk != nil {
		t := clk.NewTicker(waitRecheck)
		defer t.Stop()
		recheck = t.C()
	} else {
		t := time.NewTicker(waitRecheck)
		defer t.Stop()
		recheck = t.C
	}
	var grace, retry <-chan time.Time
	var backoff time.Duration // of the failed reads in a row, 0 after a good one
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.Woken:
		case <-recheck:
		case <-grace:
		case <-retry:
		}
		if !c.waits.Acquire(ctx) {
			return ctx.Err()
		}
		rctx, cancel := context.WithTimeout(ctx, waitRecheck)
		ok, err := ended(rctx)
		cancel()
		c.waits.Release()
		retry = nil
		var g *waitGraceError
		switch {
		case ok:
			return nil
		case errors.As(err, &g):
			backoff = 0
			if grace == nil {
				grace = time.After(g.d) // read again once it has passed
			}
		case err == nil:
			backoff = 0
		case errors.Is(err, ErrTaskNotFound) || errors.Is(err, ErrInvalid) || ctx.Err() != nil:
			return err
		default:
			if backoff == 0 {
				c.cfg.Logger.Warn("worqr: wait: reading failed; reading again shortly, or at the next event", "err", err)
				backoff = 50 * time.Millisecond
			} else {
				backoff = min(2*backoff, waitRecheck)
			}
			retry = time.After(backoff)
		}
	}
}

// RecentEvents returns the events of the latest n published batches kept in
// the event log (oldest first): only processes whose Config.EventLogLength
// is set keep one.
func (in *Inspector) RecentEvents(ctx context.Context, n int) ([]Event, error) {
	if n <= 0 {
		return nil, invalid("n", "(%d) must be at least 1", n)
	}
	batches, err := in.st.EventLog(ctx, n)
	if err != nil {
		return nil, err
	}
	var out []Event
	for _, b := range batches {
		events, err := decodeBatch(b)
		if err != nil {
			continue
		}
		out = append(out, events...)
	}
	return out, nil
}

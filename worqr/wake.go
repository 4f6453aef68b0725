package worqr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// subscribeLoop holds the worker's one pub/sub connection: wake-ups and
// cancels of every queue it serves. After each (re)subscribe it polls every
// queue, since messages sent while it was away are gone. A wake-up carrying
// 0 announces a pause or resume.
func (w *Worker) subscribeLoop() {
	channels := make([]string, 0, 2*len(w.queues))
	route := map[string]func(data []byte){}
	for _, q := range w.queues {
		q := q
		channels = append(channels, q.QK.WakeChannel, q.QK.CancelChannel)
		route[q.QK.WakeChannel] = func(data []byte) {
			if rdb.IsHandoff(data) {
				if q.parks {
					w.handed(q, data)
				}
				return
			}
			if string(data) == "0" {
				w.refreshFlags()
			}
			q.hint()
		}
		route[q.QK.CancelChannel] = func(id []byte) { w.cancelAsked(q, string(id)) }
	}
	delay := 50 * time.Millisecond
	for w.runCtx.Err() == nil {
		subscribed := false
		err := w.st.Listen(w.runCtx, channels, func() {
			subscribed = true
			w.listening.Store(true)
			// Hand-offs sent while the worker was not subscribed are
			// lost: what it holds and does not know is released.
			s, _ := w.keeper.Current()
			for _, q := range w.queues {
				if q.parks && s != nil {
					q.setUnsure(s.ID())
				}
			}
			w.pokeAll()
		}, func(ch string, data []byte) {
			if f := route[ch]; f != nil {
				f(data)
			}
		})
		w.listening.Store(false)
		if w.runCtx.Err() != nil {
			return
		}
		if s, _ := w.keeper.Current(); s != nil {
			// Nothing handed can reach the worker now: park no more.
			ctx, cancel := context.WithTimeout(w.runCtx, time.Second)
			w.unparkAll(ctx, s)
			cancel()
		}
		if err == nil {
			err = errors.New("unsubscribed")
		}
		if subscribed {
			delay = 50 * time.Millisecond // a new failure starts a new backoff
		}
		if errors.Is(err, rdb.ErrShardMoved) && subscribed {
			// A cluster moved a slot (or failed over): not an error.
			w.cfg.Logger.Info("worker: a served queue's slot moved, subscribing again", "err", err, "in", delay)
		} else {
			w.emit(Event{Kind: EventError, Err: fmt.Errorf("worqr: subscription: %w", err)})
			w.cfg.Logger.Warn("worker: subscription lost, reconnecting", "err", err, "in", delay)
		}
		if !engine.Sleep(w.runCtx, delay) {
			return
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (w *Worker) cancelRunning(id string) {
	w.runMu.Lock()
	f := w.running[id]
	w.runMu.Unlock()
	if f != nil {
		f.cancel(ErrTaskCancelled)
	}
}

// pauseLoop reads the flags of every served queue (paused, priority levels
// in use, global limits) once per poll interval (one round trip per tag), so
// a pause, a limit or a level stored in Redis is honoured within one poll
// interval even if its announcement was lost.
func (w *Worker) pauseLoop() {
	t := time.NewTicker(w.cfg.PollInterval) // Start read the flags once already
	defer t.Stop()
	for {
		select {
		case <-w.runCtx.Done():
			return
		case <-t.C:
			w.refreshFlags()
			if s, _ := w.keeper.Current(); s != nil && !s.Lost() {
				for _, q := range w.queues {
					if q.parks {
						w.checkHandoffs(s, q)
					}
				}
			}
		}
	}
}

func (w *Worker) refreshFlags() {
	ctx, cancel := context.WithTimeout(w.runCtx, engine.CallTimeout)
	defer cancel()
	qs := make([]*engine.Queue, len(w.queues))
	for i, q := range w.queues {
		qs[i] = &q.Queue
	}
	errs := engine.ReadFlags(ctx, w.st, qs, func(i int, resumed, _ bool) {
		if resumed {
			w.queues[i].hint()
		}
	})
	for i, err := range errs {
		if err != nil && w.runCtx.Err() == nil {
			w.cfg.Logger.Warn("worker: reading queue flags failed", "queue", w.queues[i].Member, "err", err)
		}
	}
}

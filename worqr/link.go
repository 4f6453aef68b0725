package worqr

import (
	"context"
	"log/slog"
	"time"

	"github.com/worqr/worqr-go/internal/link"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
)

// init hands packages remote and load the rules they share with the
// Worker and the Client (see internal/link): the same defaults, checks,
// events and engine.
func init() {
	link.ConfigDefaults = func(c Config) (Config, error) { return c.withDefaults() }
	link.FillQueue = func(field string, q QueueConfig) (QueueConfig, error) {
		if err := q.noBatch(field); err != nil {
			return q, err // remote workers take one task at a time
		}
		err := q.fill(field)
		return q, err
	}
	link.ValidateFlows = validateFlows
	link.CheckName = checkName
	link.ParseQueue = parseQueue
	link.WarnPool = func(pool ConnGetter, log *slog.Logger) { warnPool(pool, log) }
	link.NewEvents = func(st *rdb.Store, cfg Config) (func(Event), func()) {
		b := newEventBus(st, cfg)
		return b.add, b.flush
	}
	link.NewReaper = func(pool ConnGetter, cfg Config, every time.Duration, emit func(Event), who func() string) (*recovery.Reaper, error) {
		return newReaper(pool, cfg, every, emit, who)
	}
	link.InitEngine = initEngine
	link.WriteSettings = func(ctx context.Context, st *rdb.Store, qk rdb.QueueKeys, cfg *QueueConfig) error {
		return writeQueueSettings(ctx, st, qk, cfg)
	}
	link.Unwrap = unwrap
	link.SplitTyped = splitTyped
	link.ChildResults = childResults
	link.EventOf = func(o rdb.Outcome) EventKind { return eventOf[o] }
	link.LoadTarget = func(c *Client, queue string) (link.Target, error) {
		q, err := c.clientQueue(queue)
		if err != nil {
			return link.Target{}, err
		}
		return link.Target{Store: c.st, QK: q.qk, MaxPayload: c.cfg.MaxPayloadBytes,
			MarkKnown: func(ctx context.Context) error { return c.markKnown(ctx, q) },
			Enqueued: func(n int) {
				c.bus.add(Event{Kind: EventEnqueued, At: time.Now(), Queue: queue, Count: n})
			}}, nil
	}
	link.CheckPayloadPrefix = checkPayloadPrefix
}

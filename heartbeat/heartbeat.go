package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/registry"
)

// ErrLost is returned by Loop.Run when the keepalive was lost.
var ErrLost = errors.New("worqr: keepalive lost")

// Loop renews one worker id's keepalive every Interval.
type Loop struct {
	Registry *registry.Registry
	ID       string
	Interval time.Duration
	TTL      time.Duration
	Logger   *slog.Logger

	paused atomic.Bool
}

// Pause stops renewing the keepalive without declaring anything lost, as a
// frozen process would. It exists for fault-injection tests.
func (l *Loop) Pause() { l.paused.Store(true) }

// Resume undoes Pause; the next beat finds out whether the key survived.
func (l *Loop) Resume() { l.paused.Store(false) }

// Run beats until ctx ends (returning ctx.Err()) or the keepalive is lost
// (returning ErrLost). The keepalive counts as lost when a beat finds the key
// gone, or when no beat succeeded for a whole TTL (Redis unreachable): by then
// the key has expired and peers may already have requeued this worker's tasks.
func (l *Loop) Run(ctx context.Context) error {
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if l.paused.Load() {
			continue
		}
		alive, err := l.beat(ctx)
		switch {
		case err == nil && alive:
			lastOK = time.Now()
		case err == nil:
			l.log().Warn("heartbeat: keepalive lost", "worker_id", l.ID)
			return ErrLost
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			since := time.Since(lastOK)
			l.log().Warn("heartbeat: beat failed", "worker_id", l.ID, "since_last_ok", since, "err", err)
			if since >= l.TTL {
				l.log().Warn("heartbeat: keepalive lost (no beat for a whole TTL)", "worker_id", l.ID)
				return ErrLost
			}
		}
	}
}

// beatAttempts is how many connections one beat tries before it counts as
// failed: after a blip every idle connection of the pool may be dead, and
// each failed attempt makes the pool drop one.
const beatAttempts = 4

// beat renews the keepalive once, retrying at once on connection errors
// within one interval.
func (l *Loop) beat(ctx context.Context) (bool, error) {
	bctx, cancel := context.WithTimeout(ctx, l.Interval)
	defer cancel()
	var err error
	for i := 0; i < beatAttempts; i++ {
		var alive bool
		alive, err = l.Registry.Beat(bctx, l.ID, l.TTL)
		if err == nil || bctx.Err() != nil {
			return alive, err
		}
	}
	return false, err
}

func (l *Loop) log() *slog.Logger {
	if l.Logger == nil {
		return slog.Default()
	}
	return l.Logger
}

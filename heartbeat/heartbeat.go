package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

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

// A beat draws connections from the user's pool. After a blip every idle
// connection in it may be dead, and each failed attempt makes the pool drop
// one, so a beat retries at once up to quickRetries times (a dead connection
// fails in microseconds), then every retryPause until its interval is over:
// one blip never costs the keepalive, and an outage never spins the CPU.
const (
	quickRetries = 32
	retryPause   = 25 * time.Millisecond
)

// beat renews the keepalive once, retrying connection errors within one
// interval. A Redis error reply (for example a permission error) is not
// retried.
func (l *Loop) beat(ctx context.Context) (bool, error) {
	bctx, cancel := context.WithTimeout(ctx, l.Interval)
	defer cancel()
	for i := 0; ; i++ {
		alive, err := l.Registry.Beat(bctx, l.ID, l.TTL)
		var reply redis.Error
		if err == nil || errors.As(err, &reply) || bctx.Err() != nil {
			return alive, err
		}
		if i >= quickRetries {
			select {
			case <-bctx.Done():
				return false, err
			case <-time.After(retryPause):
			}
		}
	}
}

func (l *Loop) log() *slog.Logger {
	if l.Logger == nil {
		return slog.Default()
	}
	return l.Logger
}

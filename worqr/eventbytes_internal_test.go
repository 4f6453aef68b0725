package worqr

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// One publication carries about maxEventBatchBytes of events at most; the
// rest are counted in its EventDropped, so that events + dropped is what
// was observed. 2,000 events with errors of 8 KiB (stack traces of
// panicking handlers come close) were one PUBLISH of 16 MiB.
func TestEventBatchIsBoundedInBytes(t *testing.T) {
	pool := internalPool(t)
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	c := pool.Get()
	defer c.Close()
	psc := redis.PubSubConn{Conn: c}
	if err := psc.Subscribe(st.EventsChannel()); err != nil {
		t.Fatal(err)
	}
	if _, ok := psc.Receive().(redis.Subscription); !ok {
		t.Fatal("not subscribed")
	}
	b := &eventBus{st: st, interval: time.Hour, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	const n = 2000
	errText := errors.New(strings.Repeat("s", maxErrorLen))
	for range n {
		b.add(Event{Kind: EventRetry, At: time.Now(), Queue: "q", TaskID: "t", PID: "1", WorkerID: "w", Err: errText})
	}
	b.flush()
	m, ok := psc.ReceiveWithTimeout(5 * time.Second).(redis.Message)
	if !ok {
		t.Fatal("no publication")
	}
	if len(m.Data) > maxEventBatchBytes+maxEventBatchBytes/10 {
		t.Fatalf("one publication of %d bytes, want about %d at most", len(m.Data), maxEventBatchBytes)
	}
	events, err := decodeBatch(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	got, dropped := 0, 0
	for _, e := range events {
		if e.Kind == EventDropped {
			dropped += e.Count
		} else {
			got++
		}
	}
	if got+dropped != n || dropped == 0 {
		t.Fatalf("published %d events and %d dropped, want %d in all, some dropped", got, dropped, n)
	}
}

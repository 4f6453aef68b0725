package eventbus

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }

// One publication carries about maxBatchBytes of events at most; the
// rest are counted in its "dropped", so that events + dropped is what
// was observed. 2,000 events with errors of 8 KiB (stack traces of
// panicking handlers come close) were one PUBLISH of 16 MiB. The bound is
// on the JSON published: an error's bytes that JSON escapes (an HTML
// page's '<', '>' and '&', control bytes, bytes that are not UTF-8) take
// 6 bytes each there, and errors of 8 KiB of them were publications of
// 24 MiB (6 times the bound) when only their raw bytes were counted.
func TestEventBatchIsBoundedInBytes(t *testing.T) {
	for _, tc := range []struct{ name, unit string }{
		{"plain", "s"},
		{"html", "<"},
		{"control", "\x01"},
		{"not utf-8", "\xff"},
		{"utf-8", "\u00e9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testEventBatchIsBoundedInBytes(t, strings.Repeat(tc.unit, 8<<10/len(tc.unit)))
		})
	}
}

func testEventBatchIsBoundedInBytes(t *testing.T, text string) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
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
	b := New(st, time.Hour, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), "dropped")
	const n = 2000
	errText := text
	for range n {
		b.Add(Wire{Kind: "retry", At: time.Now().UnixMilli(), Queue: "q", TaskID: "t", PID: "1", WorkerID: "w", Err: errText}, "retried")
	}
	b.Flush()
	m, ok := psc.ReceiveWithTimeout(5 * time.Second).(redis.Message)
	if !ok {
		t.Fatal("no publication")
	}
	if len(m.Data) > maxBatchBytes+maxBatchBytes/10 {
		t.Fatalf("one publication of %d bytes, want about %d at most", len(m.Data), maxBatchBytes)
	}
	events, err := Decode(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	got, dropped := 0, 0
	for _, e := range events {
		if e.Kind == "dropped" {
			dropped += e.Count
		} else {
			got++
		}
	}
	if got+dropped != n || dropped == 0 {
		t.Fatalf("published %d events and %d dropped, want %d in all, some dropped", got, dropped, n)
	}
}

// jsonLen is the length of a string as the events' JSON escapes it.
func TestJSONLenIsTheEscapedLength(t *testing.T) {
	for _, s := range []string{"", "plain", "<a href=\"x\">&amp;</a>", "tab\tnl\ncr\r\b\f\x01\x1f\\",
		"\xff\xfe caf\u00e9 \u2028\u2029 \U0001F600", "\xe2\x82"} {
		q, err := appendJSONString(nil, s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonLen(s) + 2; got != len(q) {
			t.Errorf("jsonLen(%q) + 2 = %d, want %d (%s)", s, got, len(q), q)
		}
	}
}

// appendWires writes what json.Marshal writes, for every field set or
// not, and for strings that need escaping.
func TestAppendWireEventsIsJSONMarshal(t *testing.T) {
	batches := [][]Wire{
		{{Kind: "done", At: 1795483316996, WorkerID: "w1", Queue: "emails", TaskID: "d4ng2v8s0000000000g0", PID: "42"}},
		{{Kind: "started", At: 0}, {Kind: "retry", At: -5, Err: `boom: "quoted" \ back <html> & 
	tab`, Count: 3}},
		{{Kind: "recovered", At: 7, DeadWorkers: []string{"a", "b\u2028c", "\xff"}, Queue: "é"}},
		{{Kind: "stuck", At: 8, Queue: "q", TaskID: "t", RunningMs: 600000}},
		{{Kind: "dropped", Count: 10001}, {Kind: "x\x7f"}},
	}
	var buf []byte
	for _, b := range batches {
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		buf, err = appendWires(buf[:0], b)
		if err != nil {
			t.Fatal(err)
		}
		if string(buf) != string(want) {
			t.Errorf("appendWires =\n%s\nwant (json.Marshal)\n%s", buf, want)
		}
	}
}

func BenchmarkAppendWireEvents(b *testing.B) {
	batch := make([]Wire, 10000)
	for i := range batch {
		batch[i] = Wire{Kind: "done", At: 1795483316996, WorkerID: "d4ng2v8s0000000000g0", Queue: "bench", TaskID: "d4ng2v8s0000000001g0", PID: "123456"}
	}
	b.Run("appendWires", func(b *testing.B) {
		var buf []byte
		for range b.N {
			buf, _ = appendWires(buf[:0], batch)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for range b.N {
			_, _ = json.Marshal(batch)
		}
	})
}

package worqr

import (
	"encoding/json"
	"testing"
)

// appendWireEvents writes what json.Marshal writes, for every field set or
// not, and for strings that need escaping.
func TestAppendWireEventsIsJSONMarshal(t *testing.T) {
	batches := [][]wireEvent{
		{{Kind: EventDone, At: 1795483316996, WorkerID: "w1", Queue: "emails", TaskID: "d4ng2v8s0000000000g0", PID: "42"}},
		{{Kind: EventStarted, At: 0}, {Kind: EventRetry, At: -5, Err: `boom: "quoted" \ back <html> & 
	tab`, Count: 3}},
		{{Kind: EventRecovered, At: 7, DeadWorkers: []string{"a", "b\u2028c", "\xff"}, Queue: "é"}},
		{{Kind: EventDropped, Count: 10001}, {Kind: EventKind("x\x7f")}},
	}
	var buf []byte
	for _, b := range batches {
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		buf, err = appendWireEvents(buf[:0], b)
		if err != nil {
			t.Fatal(err)
		}
		if string(buf) != string(want) {
			t.Errorf("appendWireEvents =\n%s\nwant (json.Marshal)\n%s", buf, want)
		}
	}
}

func BenchmarkAppendWireEvents(b *testing.B) {
	batch := make([]wireEvent, 10000)
	for i := range batch {
		batch[i] = wireEvent{Kind: EventDone, At: 1795483316996, WorkerID: "d4ng2v8s0000000000g0", Queue: "bench", TaskID: "d4ng2v8s0000000001g0", PID: "123456"}
	}
	b.Run("appendWireEvents", func(b *testing.B) {
		var buf []byte
		for range b.N {
			buf, _ = appendWireEvents(buf[:0], batch)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for range b.N {
			_, _ = json.Marshal(batch)
		}
	})
}

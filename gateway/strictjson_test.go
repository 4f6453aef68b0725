package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A JSON request naming a field its message does not have is refused, and
// the error names the field: connect's codec dropped such fields, so an
// enqueue with a misspelled delayMS ran the task at once.
func TestJSONRefusesUnknownFields(t *testing.T) {
	g := startGateway(t, 10*time.Second)
	status, data := g.raw(t, "Enqueue", map[string]any{"queue": "strict", "payload": "eA==", "delayMS": 60000})
	var e struct{ Code, Message string }
	_ = json.Unmarshal(data, &e)
	if status != http.StatusBadRequest || e.Code != "invalid_argument" || !strings.Contains(e.Message, `"delayMS"`) {
		t.Errorf("enqueue with delayMS = %d %s; want 400 invalid_argument naming delayMS", status, data)
	}
	status, data = g.raw(t, "OpenSession", map[string]any{"name": "n", "queues": []string{"strict"}, "ttlMs": 1})
	if _ = json.Unmarshal(data, &e); status != http.StatusBadRequest || !strings.Contains(e.Message, `"ttlMs"`) {
		t.Errorf("open with ttlMs = %d %s; want 400 naming ttlMs", status, data)
	}
	var open struct{ SessionId string }
	if st, code := g.call(t, "OpenSession", map[string]any{"name": "n", "queues": []string{"strict"}}, &open); st != http.StatusOK {
		t.Fatalf("open: %d %s", st, code)
	}
	var take struct{ Takings []any }
	if st, code := g.call(t, "Take", map[string]any{"sessionId": open.SessionId, "queue": "strict"}, &take); st != http.StatusOK || len(take.Takings) != 0 {
		t.Fatalf("take after the refused enqueue: %d %s, %d takings; want none", st, code, len(take.Takings))
	}
	// Both spellings of a field stay good: lowerCamelCase and the .proto's.
	for _, delay := range []string{"delayMs", "delay_ms"} {
		if st, code := g.call(t, "Enqueue", map[string]any{"queue": "strict", "payload": "eA==", delay: 60000}, nil); st != http.StatusOK {
			t.Errorf("enqueue with %s: %d %s", delay, st, code)
		}
	}
	if st, code := g.call(t, "Take", map[string]any{"sessionId": open.SessionId, "queue": "strict"}, &take); st != http.StatusOK || len(take.Takings) != 0 {
		t.Errorf("take after two enqueues delayed by a minute: %d %s, %d takings; want none", st, code, len(take.Takings))
	}
}

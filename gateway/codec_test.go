package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
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

// A JSON reply carries every field of its message, zero values included:
// connect's codec left them out (a queue of no tasks came back as
// {"name":"q"}, a plain taking without key, payloads, state or type).
func TestJSONRepliesCarryEveryField(t *testing.T) {
	g := startGateway(t, 10*time.Second)
	check := func(method string, in any, reply proto.Message) map[string]any {
		t.Helper()
		status, data := g.raw(t, method, in)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", method, status, data)
		}
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s: %v in %s", method, err, data)
		}
		for _, miss := range missing(reply.ProtoReflect().Descriptor(), out, "") {
			t.Errorf("%s's reply has no %s: %s", method, miss, data)
		}
		return out
	}
	check("QueueStats", map[string]any{"queue": "bare"}, &gatewayv1.QueueStatsResponse{})
	enq := check("Enqueue", map[string]any{"queue": "bare", "payload": "eA=="}, &gatewayv1.EnqueueResponse{})
	open := check("OpenSession", map[string]any{"queues": []string{"bare"}}, &gatewayv1.OpenSessionResponse{})
	take := check("Take", map[string]any{"sessionId": open["sessionId"], "queue": "bare", "waitMs": 1000}, &gatewayv1.TakeResponse{})
	ks, _ := take["takings"].([]any)
	if len(ks) != 1 {
		t.Fatalf("take: %v", take)
	}
	pid := ks[0].(map[string]any)["pid"]
	check("Beat", map[string]any{"sessionId": open["sessionId"]}, &gatewayv1.BeatResponse{})
	check("Finish", map[string]any{"sessionId": open["sessionId"], "pid": pid}, &gatewayv1.EndResponse{})
	check("GetTask", map[string]any{"queue": "bare", "id": enq["id"]}, &gatewayv1.GetTaskResponse{})
}

// missing names the fields of md that obj (its JSON) lacks, nested ones
// included.
func missing(md protoreflect.MessageDescriptor, obj map[string]any, at string) []string {
	var out []string
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		name := at + f.JSONName()
		v, ok := obj[f.JSONName()]
		if !ok {
			out = append(out, name)
			continue
		}
		if f.Message() == nil || f.IsMap() {
			continue
		}
		if f.IsList() {
			l, _ := v.([]any)
			for j, e := range l {
				if o, ok := e.(map[string]any); ok {
					out = append(out, missing(f.Message(), o, fmt.Sprintf("%s[%d].", name, j))...)
				}
			}
		} else if o, ok := v.(map[string]any); ok {
			out = append(out, missing(f.Message(), o, name+".")...)
		}
	}
	return out
}

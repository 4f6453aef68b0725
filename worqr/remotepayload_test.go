package worqr_test

import (
	"context"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// A remote (gateway) worker gets a merged task's payloads of its Type out
// of their tags, as Payload is: they came still tagged.
func TestRemoteMergedTypedPayloadsAreUnwrapped(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"rm": {Keys: worqr.KeyPolicy{Merge: true}}}})
	s := open(t, b, "rm")
	for _, p := range []string{"1", "2"} {
		if _, err := worqr.EnqueueTyped(ctx, b.client, "rm", "a", []byte(p), &worqr.EnqueueOpts{Key: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	k := takeOne(t, s, "rm", 0)
	var got []string
	for _, p := range k.Payloads {
		got = append(got, string(p.Data))
	}
	if k.Type != "a" || string(k.Payload) != "2" || strings.Join(got, " ") != "1 2" {
		t.Errorf("taking of type %q, payload %q, payloads %q; want type a, payload 2, payloads [1 2]", k.Type, k.Payload, got)
	}
	if _, err := s.Finish(ctx, k.PID, nil); err != nil {
		t.Fatal(err)
	}
}

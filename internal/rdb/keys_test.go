package rdb_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

func TestHashTag(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, want string }{
		{"ns:{q}:t:1", "q"},
		{"{q}", "q"},
		{"ns:{reg}:workers", "reg"},
		{"no-tag", "no-tag"},
		{"ns:{}:x", "ns:{}:x"},   // empty tag: the whole key is hashed
		{"ns:{open", "ns:{open"}, // no closing brace
		{"ns:}x{y}", "y"},        // a } before the first { does not count
		{"ns:{a}{b}", "a"},       // the first tag wins
		{"ns:{{a}}", "{a"},       // up to the first } after the first {
		{"ns:{}{a}", "ns:{}{a}"}, // the first { decides, even when empty
		{"", ""},
	}
	for _, tc := range tests {
		if got := rdb.HashTag(tc.key); got != tc.want {
			t.Errorf("HashTag(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// queueKeyNames returns every key and channel name QueueKeys holds or
// builds, found by reflection so that a new field is checked too.
func queueKeyNames(q rdb.QueueKeys) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(q)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.String {
			out[v.Type().Field(i).Name] = f.String()
		}
	}
	out["Task(id)"] = q.Task("c9mjv0kdh5q0v9q5ta6g")
	out["WorkerQueue(w)"] = q.WorkerQueue("c9mjv0kdh5q0v9q5ta70")
	return out
}

func TestQueueKeysCarryTheQueueTag(t *testing.T) {
	t.Parallel()
	k := rdb.NewKeys("app")
	for _, ref := range []rdb.QueueRef{
		rdb.Standalone("emails"),
		{Tag: "signup", Name: "send-mail"},
		rdb.Standalone("reg"), // a queue named like the registry tag
	} {
		q := k.Queue(ref)
		if q.Ref != ref {
			t.Errorf("Queue(%v).Ref = %v", ref, q.Ref)
		}
		names := queueKeyNames(q)
		if len(names) < 11 {
			t.Fatalf("found only %d key names in QueueKeys: %v", len(names), names)
		}
		seen := map[string]string{}
		for field, key := range names {
			if !strings.HasPrefix(key, "app:") {
				t.Errorf("%v %s = %q: not in namespace app", ref, field, key)
			}
			if tag := rdb.HashTag(key); tag != ref.Tag {
				t.Errorf("%v %s = %q: hash tag %q, want %q", ref, field, key, tag, ref.Tag)
			}
			if other, dup := seen[key]; dup {
				t.Errorf("%v: %s and %s are both %q", ref, field, other, key)
			}
			seen[key] = field
		}
	}
}

func TestQueuesOfOneTagKeepTheirOwnKeys(t *testing.T) {
	t.Parallel()
	k := rdb.NewKeys("app")
	a := k.Queue(rdb.QueueRef{Tag: "flow", Name: "a"})
	b := k.Queue(rdb.QueueRef{Tag: "flow", Name: "b"})
	for field, ka := range map[string][2]string{
		"Waiting":        {a.Waiting, b.Waiting},
		"Holders":        {a.Holders, b.Holders},
		"WakeChannel":    {a.WakeChannel, b.WakeChannel},
		"CancelChannel":  {a.CancelChannel, b.CancelChannel},
		"WorkerQueue(w)": {a.WorkerQueue("w"), b.WorkerQueue("w")},
	} {
		if ka[0] == ka[1] {
			t.Errorf("queues a and b of one tag share %s %q", field, ka[0])
		}
	}
	// Pids and task hashes belong to the tag: a flow's stages share them.
	if a.Seq != b.Seq || a.TaskPrefix != b.TaskPrefix {
		t.Errorf("queues of one tag do not share Seq/TaskPrefix: %+v %+v", a, b)
	}
}

func TestRegistryKeysCarryTheRegTag(t *testing.T) {
	t.Parallel()
	k := rdb.NewKeys("app")
	keys := []string{k.Workers(), k.Keepalive("w1"), k.KeepalivePrefix(), k.KnownQueues(), k.ReaperLease(), k.History(29000000)}
	seen := map[string]bool{}
	for _, key := range keys {
		if !strings.HasPrefix(key, "app:") || rdb.HashTag(key) != "reg" {
			t.Errorf("registry key %q: want namespace app and tag reg", key)
		}
		if seen[key] {
			t.Errorf("registry key %q built twice", key)
		}
		seen[key] = true
	}
	if k.Keepalive("w1") != k.KeepalivePrefix()+"w1" {
		t.Errorf("Keepalive(w1) = %q, not KeepalivePrefix()+id", k.Keepalive("w1"))
	}
	if k.Namespace() != "app" {
		t.Errorf("Namespace() = %q", k.Namespace())
	}
}

func TestMemberRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ref    rdb.QueueRef
		member string
	}{
		{rdb.Standalone("emails"), "emails"},
		{rdb.QueueRef{Tag: "signup", Name: "send"}, "signup/send"},
	} {
		if got := tc.ref.Member(); got != tc.member {
			t.Errorf("%v.Member() = %q, want %q", tc.ref, got, tc.member)
		}
		if got := rdb.ParseMember(tc.member); got != tc.ref {
			t.Errorf("ParseMember(%q) = %v, want %v", tc.member, got, tc.ref)
		}
	}
}

// A queue's ended channel names its queue back; other channels do not.
func TestEndedQueue(t *testing.T) {
	k := rdb.NewKeys("ns")
	for _, q := range []rdb.QueueRef{rdb.Standalone("emails"), {Tag: "signup", Name: "welcome"}} {
		got, ok := k.EndedQueue(k.Queue(q).EndedChannel)
		if !ok || got != q {
			t.Errorf("EndedQueue(%s) = %+v, %v; want %+v", k.Queue(q).EndedChannel, got, ok, q)
		}
	}
	for _, ch := range []string{k.Queue(rdb.Standalone("emails")).WakeChannel, k.Events(), "other:{emails}:ended:emails", "ns:{}:ended:x"} {
		if q, ok := k.EndedQueue(ch); ok {
			t.Errorf("EndedQueue(%s) = %+v, want none", ch, q)
		}
	}
}

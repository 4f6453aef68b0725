package rdb

import (
	"strings"
	"testing"
)

// FuzzDecodeRun: decoding a run hash read from Redis never panics, keeps
// every "f:" field, and finds one child per "k:" field.
func FuzzDecodeRun(f *testing.F) {
	f.Add("f:userId", "42", "k:c1", "done", "kr:c1", "ok")
	f.Add("k:", "", "kq:", "x", "f:", "")
	f.Add("s", "active", "n", "abc", "ft", "-1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		m := map[string]string{k1: v1, k2: v2, k3: v3}
		r := DecodeRun("r", m)
		if m[FieldRunStatus] == "" {
			if r != nil {
				t.Fatalf("DecodeRun(%v) without a status: %+v", m, r)
			}
			return
		}
		state, kids := r.State, r.Children
		wantF, wantK := 0, 0
		for k := range m {
			if strings.HasPrefix(k, "f:") {
				wantF++
			}
			if strings.HasPrefix(k, "k:") {
				wantK++
			}
		}
		if len(state) != wantF || len(kids) != wantK {
			t.Fatalf("DecodeRun(%v): %d fields, %d children; want %d, %d", m, len(state), len(kids), wantF, wantK)
		}
	})
}

// FuzzDecodeTask: a task hash read from Redis, however corrupt, decodes
// without panicking; the payload and the error text come back unchanged.
func FuzzDecodeTask(f *testing.F) {
	f.Add("dc0tj79ksdue97si2fng", "payload", "active", "3", "x", "boom", "1700000000000")
	f.Add("not-an-xid", "", "", "-1", "", "", "abc")
	f.Add("", "\x00\xff", "dead", "99999999999999999999", "1", "", "-5")
	f.Fuzz(func(t *testing.T, id, d, s, n, x, e, ft string) {
		info := DecodeTask(id, map[string]string{"d": d, "s": s, "n": n, "c": n, "x": x, "e": e, "ft": ft, "dt": ft})
		if string(info.Payload) != d || info.LastError != e || info.ID != id {
			t.Fatalf("DecodeTask changed what it read: %+v", info)
		}
		if s == "" && info.State != StateQueued || s != "" && info.State != s {
			t.Fatalf("state %q read as %q", s, info.State)
		}
	})
}

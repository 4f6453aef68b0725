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

package worqr

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// FuzzCheckQueueName: a name is accepted exactly when it is 1 to MaxNameLen
// bytes of the allowed characters, and every rejection is an *InvalidError
// naming the field.
func FuzzCheckQueueName(f *testing.F) {
	for _, s := range []string{"", "emails", "a b", "a{b}", "a:b", "a/b", "é", strings.Repeat("x", 101), "ok.name-1_2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckQueueName(name)
		valid := len(name) >= 1 && len(name) <= MaxNameLen && strings.Trim(name,
			"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == ""
		if valid != (err == nil) {
			t.Fatalf("CheckQueueName(%q) = %v, want valid=%v", name, err, valid)
		}
		if err != nil {
			var ie *InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || ie.Field != "queue name" {
				t.Fatalf("CheckQueueName(%q): error %v is not an InvalidError on the queue name", name, err)
			}
		}
	})
}

// FuzzEnqueueOpts: validation never panics, and what it accepts is coherent.
func FuzzEnqueueOpts(f *testing.F) {
	f.Add(int64(0), int64(0), 0, int64(0), "", int64(0), 1)
	f.Add(int64(-1), int64(5), 3, int64(1000), "k", int64(1000), 1)
	f.Add(int64(5), int64(1e12), -1, int64(-5), strings.Repeat("k", 600), int64(0), 2)
	f.Fuzz(func(t *testing.T, delay, at int64, maxAttempts int, timeout int64, key string, ttl int64, n int) {
		o := &EnqueueOpts{Delay: time.Duration(delay), MaxAttempts: maxAttempts, Timeout: time.Duration(timeout),
			UniqueKey: key, UniqueTTL: time.Duration(ttl)}
		if at != 0 {
			o.At = time.UnixMilli(at)
		}
		qk := rdb.NewKeys("ns").Queue(rdb.Standalone("q"))
		a, err := o.args(qk, n)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("non-InvalidError %v", err)
			}
			return
		}
		if a.DelayMillis < 0 || a.TimeoutMs < 0 || a.MaxAttempts < 0 {
			t.Fatalf("accepted negative values: %+v", a)
		}
		if a.UniqueKey != "" && (n != 1 || a.UniqueTTL < 1 || !strings.HasPrefix(a.UniqueKey, qk.UniquePrefix)) {
			t.Fatalf("accepted a bad unique key: %+v (n=%d)", a, n)
		}
	})
}

// FuzzDecodeRun: decoding a run hash read from Redis never panics, keeps
// every "f:" field, and finds one child per "k:" field.
func FuzzDecodeRun(f *testing.F) {
	f.Add("f:userId", "42", "k:c1", "done", "kr:c1", "ok")
	f.Add("k:", "", "kq:", "x", "f:", "")
	f.Add("s", "active", "n", "abc", "ft", "-1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		m := map[string]string{k1: v1, k2: v2, k3: v3}
		state, kids := decodeRun(m)
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
			t.Fatalf("decodeRun(%v): %d fields, %d children; want %d, %d", m, len(state), len(kids), wantF, wantK)
		}
		_ = msTime(v1)
	})
}

// FuzzDecodeTask: a task hash read from Redis, however corrupt, decodes
// without panicking; the payload and the error text come back unchanged.
func FuzzDecodeTask(f *testing.F) {
	f.Add("dc0tj79ksdue97si2fng", "payload", "active", "3", "x", "boom", "1700000000000")
	f.Add("not-an-xid", "", "", "-1", "", "", "abc")
	f.Add("", "\x00\xff", "dead", "99999999999999999999", "1", "", "-5")
	f.Fuzz(func(t *testing.T, id, d, s, n, x, e, ft string) {
		info := decodeTask(id, "q", map[string]string{"d": d, "s": s, "n": n, "c": n, "x": x, "e": e, "ft": ft, "dt": ft})
		if string(info.Payload) != d || info.LastError != e || info.ID != id {
			t.Fatalf("decodeTask changed what it read: %+v", info)
		}
		if s == "" && info.State != StateQueued || s != "" && string(info.State) != s {
			t.Fatalf("state %q read as %q", s, info.State)
		}
	})
}

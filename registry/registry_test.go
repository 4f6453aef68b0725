package registry_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/registry"
)

type env struct {
	ctx  context.Context
	pool *redis.Pool
	k    rdb.Keys
	r    *registry.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	r, err := registry.New(pool, ns)
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: context.Background(), pool: pool, k: rdb.NewKeys(ns), r: r}
}

func (e *env) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	c := e.pool.Get()
	defer c.Close()
	v, err := c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

func (e *env) exists(t *testing.T, key string) bool {
	t.Helper()
	return e.do(t, "EXISTS", key).(int64) == 1
}

func (e *env) pttl(t *testing.T, key string) int64 {
	t.Helper()
	return e.do(t, "PTTL", key).(int64)
}

func (e *env) members(t *testing.T, key string) []string {
	t.Helper()
	m, err := redis.Strings(e.do(t, "SMEMBERS", key), nil)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

// The host and process id every test registers with.
const (
	host = "host-1"
	pid  = 4242
)

func (e *env) register(t *testing.T, id string, ttl time.Duration, qs ...registry.Queue) {
	t.Helper()
	if _, err := e.r.Register(e.ctx, id, ttl, host, pid, qs); err != nil {
		t.Fatalf("Register(%s): %v", id, err)
	}
}

// waitGone waits until key's TTL has run out in Redis (nothing signals it).
func (e *env) waitGone(t *testing.T, key string) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, key+" to expire", func() bool { return !e.exists(t, key) })
}

// checkAt checks that at (returned by Register or Beat) is Redis's clock
// between before and after, to the millisecond.
func checkAt(t *testing.T, what string, at, before, after time.Time) {
	t.Helper()
	if at.Before(before.Truncate(time.Millisecond)) || at.After(after) {
		t.Errorf("%s returned at = %v, want Redis time between %v and %v", what, at, before, after)
	}
}

func standalone(name string) registry.Queue { return registry.Queue{Tag: name, Name: name} }

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	pool := srv.TagCheckedPool(t)
	for _, tc := range []struct {
		name string
		pool registry.ConnGetter
		ns   string
		want string
	}{
		{"nil pool", nil, "worqr", "pool is nil"},
		{"empty namespace", pool, "", "namespace is empty"},
	} {
		r, err := registry.New(tc.pool, tc.ns)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "registry: ") {
			t.Errorf("%s: New = %v, %v; want an error saying %q", tc.name, r, err, tc.want)
		}
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.redisNow(t)
	at, err := e.r.Register(e.ctx, "A", 2*time.Second, host, pid, []registry.Queue{standalone("emails"), {Tag: "flow", Name: "s1"}})
	if err != nil {
		t.Fatal(err)
	}
	checkAt(t, "Register", at, before, e.redisNow(t))

	if got := e.do(t, "GET", e.k.Keepalive("A")); got == nil {
		t.Fatal("keepalive of A missing after Register")
	}
	if ttl := e.pttl(t, e.k.Keepalive("A")); ttl <= 1000 || ttl > 2000 {
		t.Errorf("keepalive PTTL = %dms, want in (1000, 2000]", ttl)
	}
	ws, err := e.r.Workers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ws, []string{"A"}) {
		t.Errorf("Workers = %v, want [A]", ws)
	}
	if got := e.members(t, e.k.KnownQueues()); !reflect.DeepEqual(got, []string{"emails", "flow/s1"}) {
		t.Errorf("known queues = %v", got)
	}
	info, _ := redis.StringMap(e.do(t, "HGETALL", e.k.WorkerInfo("A")), nil)

	_, err = e.r.Register(e.ctx, "A", time.Minute, "other-host", 1, []registry.Queue{standalone("other")})
	if !errors.Is(err, registry.ErrIDInUse) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("second Register(A) = %v, want ErrIDInUse ('already in use')", err)
	}
	if ttl := e.pttl(t, e.k.Keepalive("A")); ttl > 2000 {
		t.Errorf("failed Register extended the keepalive to %dms", ttl)
	}
	if got := e.members(t, e.k.KnownQueues()); !reflect.DeepEqual(got, []string{"emails", "flow/s1"}) {
		t.Errorf("failed Register changed the known queues: %v", got)
	}
	if again, _ := redis.StringMap(e.do(t, "HGETALL", e.k.WorkerInfo("A")), nil); !reflect.DeepEqual(again, info) {
		t.Errorf("failed Register changed A's description:\nbefore %v\nafter  %v", info, again)
	}
}

func TestBeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A", 10*time.Second) // alive for the first Beat, however loaded the machine

	before := e.redisNow(t)
	ok, at, err := e.r.Beat(e.ctx, "A", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Beat(A) on a live key = %v, %v; want true", ok, err)
	}
	checkAt(t, "Beat", at, before, e.redisNow(t))
	if ttl := e.pttl(t, e.k.Keepalive("A")); ttl <= 50_000 {
		t.Errorf("Beat did not renew the TTL: PTTL = %dms, want about 60000", ttl)
	}

	e.do(t, "DEL", e.k.Keepalive("A"))
	ok, _, err = e.r.Beat(e.ctx, "A", time.Minute)
	if err != nil || ok {
		t.Fatalf("Beat(A) on a deleted key = %v, %v; want false", ok, err)
	}
	if e.exists(t, e.k.Keepalive("A")) {
		t.Error("Beat recreated a deleted keepalive")
	}

	ok, _, err = e.r.Beat(e.ctx, "never-registered", time.Minute)
	if err != nil || ok {
		t.Fatalf("Beat of an unknown id = %v, %v; want false", ok, err)
	}
	if e.exists(t, e.k.Keepalive("never-registered")) {
		t.Error("Beat created a keepalive for an unknown id")
	}
}

func TestBeatAfterExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A", 50*time.Millisecond)
	e.waitGone(t, e.k.Keepalive("A"))
	ok, _, err := e.r.Beat(e.ctx, "A", time.Minute)
	if err != nil || ok {
		t.Fatalf("Beat(A) after expiry = %v, %v; want false", ok, err)
	}
	if e.exists(t, e.k.Keepalive("A")) {
		t.Error("Beat brought an expired keepalive back")
	}
}

func TestDeregister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A", time.Minute, standalone("q"))
	e.register(t, "B", time.Minute, standalone("q"))

	if err := e.r.Deregister(e.ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if e.exists(t, e.k.Keepalive("A")) {
		t.Error("keepalive of A still exists after Deregister")
	}
	if e.exists(t, e.k.WorkerInfo("A")) {
		t.Error("description of A still exists after Deregister")
	}
	if !e.exists(t, e.k.Keepalive("B")) || !e.exists(t, e.k.WorkerInfo("B")) {
		t.Error("Deregister(A) deleted B's keepalive or description")
	}
	if got := e.members(t, e.k.Workers()); !reflect.DeepEqual(got, []string{"B"}) {
		t.Errorf("Workers after Deregister(A) = %v, want [B]", got)
	}
	if got := e.members(t, e.k.KnownQueues()); !reflect.DeepEqual(got, []string{"q"}) {
		t.Errorf("Deregister changed the known queues: %v", got)
	}
	// Deregistering twice is harmless.
	if err := e.r.Deregister(e.ctx, "A"); err != nil {
		t.Fatalf("second Deregister: %v", err)
	}
}

func TestAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A", time.Minute)
	e.register(t, "C", time.Minute)
	e.do(t, "DEL", e.k.Keepalive("C"))

	got, err := e.r.Alive(e.ctx, []string{"A", "B", "C", "A"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("Alive(A, B, C, A) = %v, want %v", got, want)
	}
	got, err = e.r.Alive(e.ctx, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Alive(nil) = %v, %v; want empty", got, err)
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"A", "B", "C"} {
		e.register(t, id, time.Minute, standalone("q"))
	}
	if err := e.r.Forget(e.ctx, []string{"A", "C", "unknown"}); err != nil {
		t.Fatal(err)
	}
	ws, err := e.r.Workers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ws, []string{"B"}) {
		t.Errorf("Workers after Forget(A, C) = %v, want [B]", ws)
	}
	// Forget edits the Workers set and drops the descriptions, nothing else:
	// keepalives are Redis's to expire.
	if !e.exists(t, e.k.Keepalive("A")) {
		t.Error("Forget deleted a keepalive")
	}
	for _, id := range []string{"A", "C"} {
		if e.exists(t, e.k.WorkerInfo(id)) {
			t.Errorf("description of %s still exists after Forget", id)
		}
	}
	if !e.exists(t, e.k.WorkerInfo("B")) {
		t.Error("Forget(A, C) deleted B's description")
	}
	if got := e.members(t, e.k.KnownQueues()); !reflect.DeepEqual(got, []string{"q"}) {
		t.Errorf("Forget changed the known queues: %v", got)
	}
	if err := e.r.Forget(e.ctx, nil); err != nil {
		t.Errorf("Forget(nil) = %v", err)
	}
}

func TestKnownQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got, err := e.r.KnownQueues(e.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("KnownQueues of an empty namespace = %v, %v", got, err)
	}
	e.register(t, "A", time.Minute, standalone("emails"), registry.Queue{Tag: "signup", Name: "mail"})
	e.register(t, "B", time.Minute, standalone("emails"), standalone("thumbs"))
	// A dead worker's queues stay known: its takings must stay reachable.
	e.do(t, "DEL", e.k.Keepalive("A"))

	got, err = e.r.KnownQueues(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Member() < got[j].Member() })
	want := []registry.Queue{
		standalone("emails"),
		{Tag: "signup", Name: "mail"},
		standalone("thumbs"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("KnownQueues = %v, want %v", got, want)
	}
}

func TestAcquireLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Long enough for a loaded machine (a lease of 150 ms expired between
	// two of the checks below); its end is brought forward with PEXPIRE.
	const ttl = 10 * time.Second
	acquire := func(holder string) bool {
		t.Helper()
		ok, err := e.r.AcquireLease(e.ctx, holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if !acquire("r1") {
		t.Fatal("first AcquireLease failed on a free lease")
	}
	if got, _ := redis.String(e.do(t, "GET", e.k.ReaperLease()), nil); got != "r1" {
		t.Errorf("lease holder = %q, want r1", got)
	}
	if ms := e.pttl(t, e.k.ReaperLease()); ms <= 0 || ms > ttl.Milliseconds() {
		t.Errorf("lease PTTL = %dms, want in (0, %d]", ms, ttl.Milliseconds())
	}
	if acquire("r2") {
		t.Error("second AcquireLease succeeded while the lease was held")
	}
	if acquire("r1") {
		t.Error("the holder got the lease again while holding it (the lease must not be extended)")
	}
	if got, _ := redis.String(e.do(t, "GET", e.k.ReaperLease()), nil); got != "r1" {
		t.Errorf("failed acquires changed the holder to %q", got)
	}

	e.do(t, "PEXPIRE", e.k.ReaperLease(), 1)
	e.waitGone(t, e.k.ReaperLease())
	if !acquire("r2") {
		t.Fatal("AcquireLease failed after the lease expired")
	}
	if got, _ := redis.String(e.do(t, "GET", e.k.ReaperLease()), nil); got != "r2" {
		t.Errorf("lease holder = %q, want r2", got)
	}
}

// redisNow reads the server's clock.
func (e *env) redisNow(t *testing.T) time.Time {
	t.Helper()
	v, err := redis.Int64s(e.do(t, "TIME"), nil)
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME = %v, %v", v, err)
	}
	return time.Unix(v[0], v[1]*1000)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.redisNow(t).Truncate(time.Millisecond)
	e.register(t, "A", time.Minute, standalone("emails"), registry.Queue{Tag: "signup", Name: "mail"})
	after := e.redisNow(t)
	if _, err := e.r.Register(e.ctx, "B", 30*time.Second, "host-2", 7, nil); err != nil {
		t.Fatal(err)
	}
	// A's keepalive was last renewed 15s ago: 45s of its minute are left.
	e.do(t, "PEXPIRE", e.k.Keepalive("A"), 45_000)
	// B is dead, not yet reaped.
	e.do(t, "DEL", e.k.Keepalive("B"))

	got, err := e.r.Describe(e.ctx, []string{"A", "B", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Describe(A, B, unknown) returned %d records, want 3: %+v", len(got), got)
	}
	a, b, u := got[0], got[1], got[2]

	if a.ID != "A" || a.Host != host || a.PID != pid || a.TTL != time.Minute || !a.Alive {
		t.Errorf("Describe(A) = %+v, want id A, host %s, pid %d, TTL 1m, alive", a, host, pid)
	}
	if want := []registry.Queue{standalone("emails"), {Tag: "signup", Name: "mail"}}; !reflect.DeepEqual(a.Queues, want) {
		t.Errorf("A's queues = %v, want %v", a.Queues, want)
	}
	if a.Started.Before(before) || a.Started.After(after) {
		t.Errorf("A started at %v, want Redis time of its registration, in [%v, %v]", a.Started, before, after)
	}
	if a.KeepaliveAge < 15*time.Second || a.KeepaliveAge > 20*time.Second {
		t.Errorf("A's keepalive age = %v, want about 15s (TTL 1m, 45s left)", a.KeepaliveAge)
	}

	if b.ID != "B" || b.Host != "host-2" || b.PID != 7 || b.TTL != 30*time.Second || len(b.Queues) != 0 {
		t.Errorf("Describe(B) = %+v, want id B, host-2, pid 7, TTL 30s, no queues", b)
	}
	if b.Alive || b.KeepaliveAge != 0 {
		t.Errorf("dead B: Alive = %v, KeepaliveAge = %v; want false, 0", b.Alive, b.KeepaliveAge)
	}

	if want := (registry.WorkerInfo{ID: "unknown"}); !reflect.DeepEqual(u, want) {
		t.Errorf("Describe(unknown) = %+v, want %+v", u, want)
	}

	// Forget drops the description with the registration.
	if err := e.r.Forget(e.ctx, []string{"B"}); err != nil {
		t.Fatal(err)
	}
	got, err = e.r.Describe(e.ctx, []string{"B"})
	if err != nil || len(got) != 1 || got[0].Host != "" || got[0].PID != 0 || !got[0].Started.IsZero() {
		t.Errorf("Describe(B) after Forget = %+v, %v; want an empty record", got, err)
	}
	got, err = e.r.Describe(e.ctx, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Describe(nil) = %+v, %v; want empty", got, err)
	}
}

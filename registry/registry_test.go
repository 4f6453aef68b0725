package registry_test

import (
	"context"
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
	k := rdb.NewKeys(redistest.Namespace())
	return &env{ctx: context.Background(), pool: pool, k: k, r: registry.New(pool, k)}
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

func (e *env) register(t *testing.T, id string, ttl time.Duration, qs ...rdb.QueueRef) {
	t.Helper()
	if err := e.r.Register(e.ctx, id, ttl, qs); err != nil {
		t.Fatalf("Register(%s): %v", id, err)
	}
}

// waitGone polls until key no longer exists.
func (e *env) waitGone(t *testing.T, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.exists(t, key) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after 5s", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A", 2*time.Second, rdb.Standalone("emails"), rdb.QueueRef{Tag: "flow", Name: "s1"})

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

	err = e.r.Register(e.ctx, "A", time.Minute, []rdb.QueueRef{rdb.Standalone("other")})
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("second Register(A) = %v, want an 'already in use' error", err)
	}
	if ttl := e.pttl(t, e.k.Keepalive("A")); ttl > 2000 {
		t.Errorf("failed Register extended the keepalive to %dms", ttl)
	}
	if got := e.members(t, e.k.KnownQueues()); !reflect.DeepEqual(got, []string{"emails", "flow/s1"}) {
		t.Errorf("failed Register changed the known queues: %v", got)
	}
}

func TestBeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A", 500*time.Millisecond)

	ok, err := e.r.Beat(e.ctx, "A", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Beat(A) on a live key = %v, %v; want true", ok, err)
	}
	if ttl := e.pttl(t, e.k.Keepalive("A")); ttl <= 50_000 {
		t.Errorf("Beat did not renew the TTL: PTTL = %dms, want about 60000", ttl)
	}

	e.do(t, "DEL", e.k.Keepalive("A"))
	ok, err = e.r.Beat(e.ctx, "A", time.Minute)
	if err != nil || ok {
		t.Fatalf("Beat(A) on a deleted key = %v, %v; want false", ok, err)
	}
	if e.exists(t, e.k.Keepalive("A")) {
		t.Error("Beat recreated a deleted keepalive")
	}

	ok, err = e.r.Beat(e.ctx, "never-registered", time.Minute)
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
	ok, err := e.r.Beat(e.ctx, "A", time.Minute)
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
	e.register(t, "A", time.Minute, rdb.Standalone("q"))
	e.register(t, "B", time.Minute, rdb.Standalone("q"))

	if err := e.r.Deregister(e.ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if e.exists(t, e.k.Keepalive("A")) {
		t.Error("keepalive of A still exists after Deregister")
	}
	if !e.exists(t, e.k.Keepalive("B")) {
		t.Error("Deregister(A) deleted B's keepalive")
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
		e.register(t, id, time.Minute)
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
	// Forget only edits the Workers set.
	if !e.exists(t, e.k.Keepalive("A")) {
		t.Error("Forget deleted a keepalive")
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
	e.register(t, "A", time.Minute, rdb.Standalone("emails"), rdb.QueueRef{Tag: "signup", Name: "mail"})
	e.register(t, "B", time.Minute, rdb.Standalone("emails"), rdb.Standalone("thumbs"))
	// A dead worker's queues stay known: its takings must stay reachable.
	e.do(t, "DEL", e.k.Keepalive("A"))

	got, err = e.r.KnownQueues(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Member() < got[j].Member() })
	want := []rdb.QueueRef{
		rdb.Standalone("emails"),
		{Tag: "signup", Name: "mail"},
		rdb.Standalone("thumbs"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("KnownQueues = %v, want %v", got, want)
	}
}

func TestAcquireLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 150 * time.Millisecond
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

	e.waitGone(t, e.k.ReaperLease())
	if !acquire("r2") {
		t.Fatal("AcquireLease failed after the lease expired")
	}
	if got, _ := redis.String(e.do(t, "GET", e.k.ReaperLease()), nil); got != "r2" {
		t.Errorf("lease holder = %q, want r2", got)
	}
}

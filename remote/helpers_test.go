package remote_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }

// remoteBundle is a started Server, a Client and an Inspector on one fresh
// namespace.
type remoteBundle struct {
	remote *remote.Server
	client *worqr.Client
	insp   *worqr.Inspector
	ns     string
}

func setupRemote(t *testing.T, ctx context.Context, cfg remote.Config) *remoteBundle {
	t.Helper()
	cfg.DisableEvents = true
	return setupRemoteOn(t, ctx, srv.TagCheckedPool(t), cfg)
}

// setupRemoteOn is setupRemote on pool, its events as cfg says.
func setupRemoteOn(t *testing.T, ctx context.Context, pool worqr.ConnGetter, cfg remote.Config) *remoteBundle {
	t.Helper()
	ns := redistest.Namespace()
	cfg.Namespace = ns
	r, err := remote.NewServer(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = r.Stop(sctx)
	})
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	return &remoteBundle{remote: r, client: c, insp: in, ns: ns}
}

func open(t *testing.T, b *remoteBundle, queues ...string) *remote.Session {
	t.Helper()
	s, err := b.remote.Open(context.Background(), remote.OpenOpts{Name: t.Name(), Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func takeOne(t *testing.T, s *remote.Session, queue string, wait time.Duration) remote.Taking {
	t.Helper()
	ks, err := s.Take(context.Background(), remote.TakeRequest{Queue: queue, Max: 1, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 1 {
		t.Fatalf("took %d tasks, want 1", len(ks))
	}
	return ks[0]
}

func newClient(t testing.TB, pool worqr.ConnGetter, cfg *worqr.Config) *worqr.Client {
	t.Helper()
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newInspector(t testing.TB, pool worqr.ConnGetter, cfg *worqr.Config) *worqr.Inspector {
	t.Helper()
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// queueLen is how many tasks wait in queue.
func queueLen(t testing.TB, in *worqr.Inspector, queue string) int {
	t.Helper()
	qi, err := in.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return int(qi.Waiting)
}

// wait fails t unless cond holds within d.
func wait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !redistest.Within(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// manyFields is n state fields of size bytes each.
func manyFields(n, size int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("f%05d", i)] = strings.Repeat("v", size)
	}
	return m
}

// invalidField is the field an *InvalidError err names.
func invalidField(t *testing.T, what string, err error) string {
	t.Helper()
	var ie *worqr.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("%s = %v, want an *InvalidError", what, err)
	}
	return ie.Field
}

// deadAndCancelled adds up queue's history of the last two minutes, once
// its dead count is at least one.
func deadAndCancelled(t *testing.T, ctx context.Context, in *worqr.Inspector, queue string) (dead, cancelled int64) {
	t.Helper()
	count := func() (dead, cancelled int64) {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			dead, cancelled = dead+m.Dead, cancelled+m.Cancelled
		}
		return dead, cancelled
	}
	wait(t, 10*time.Second, "the history of "+queue, func() bool { d, _ := count(); return d >= 1 })
	return count() // (the worker's events of one end or take are published together)
}

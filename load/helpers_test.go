package load_test

import (
	"context"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }

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

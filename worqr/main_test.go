package worqr_test

import (
	"context"
	"os"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	if role := os.Getenv("WORQR_TEST_CHILD"); role != "" {
		// A child process of a test (see startChild): it uses its parent's
		// server (WORQR_TEST_REDIS_URL).
		srv = redistest.MustStart()
		os.Exit(runChild(role))
	}
	srv = redistest.MustStart()
	// The examples read the servers' addresses as a program would.
	os.Setenv("WORQR_REDIS_URL", srv.URL)
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// newInspector returns an Inspector on pool with cfg (in most tests, the
// config of the Client whose tasks it reads), and fails t if it cannot.
func newInspector(t testing.TB, pool worqr.ConnGetter, cfg *worqr.Config) *worqr.Inspector {
	t.Helper()
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// queueLen returns how many tasks wait in queue (Inspector.Queue's
// Waiting), and fails t if it cannot read it.
func queueLen(t testing.TB, in *worqr.Inspector, queue string) int {
	t.Helper()
	qi, err := in.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return int(qi.Waiting)
}

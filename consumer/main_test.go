package consumer_test

import (
	"os"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	// The kill -9 test re-executes this binary as consumer processes.
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	srv = redistest.MustStart()
	// The examples read the server's address as a program would.
	os.Setenv("WORQR_REDIS_URL", srv.URL)
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

package worqr_test

import (
	"os"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	srv = redistest.MustStart()
	// The examples read the server's address as a program would.
	os.Setenv("WORQR_REDIS_URL", srv.URL)
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

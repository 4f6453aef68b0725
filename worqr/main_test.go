package worqr_test

import (
	"os"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	if role := os.Getenv("WORQR_TEST_CHILD"); role != "" {
		// A child process of a test (see startChild): it uses its parent's
		// server (WORQR_TEST_REDIS_URL).
		srv = redistest.MustStart()
		os.Exit(runChild(role))
	}
	redistest.Main(m, &srv)
}

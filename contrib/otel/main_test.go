package otelworqr_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

// The tests run against a real redis-server: TestMain starts a private one
// (or uses WORQR_TEST_REDIS_URL), with internal/redistest.
var redisURL string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	srv, err := redistest.Start() // or the server WORQR_TEST_REDIS_URL names
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 2
	}
	defer srv.Stop()
	redisURL = srv.URL
	return m.Run()
}

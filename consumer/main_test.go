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
	redistest.Main(m, &srv)
}

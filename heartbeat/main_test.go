package heartbeat_test

import (
	"os"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	srv = redistest.MustStart()
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

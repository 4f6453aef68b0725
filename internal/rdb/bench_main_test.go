package rdb_test

import (
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

// server returns the package's test server (started in TestMain).
func server(testing.TB) *redistest.Server { return srv }

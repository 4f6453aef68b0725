package rdb_test

import (
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.Main(m, &srv)
}

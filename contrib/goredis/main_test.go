package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/worqr/worqr-go/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }

// newClient returns a go-redis client of the test server with opt's
// settings (Protocol 2 unless opt says), closed after the test.
func newClient(t testing.TB, opt *redis.Options) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	o.Protocol = 2
	if opt != nil {
		if opt.Protocol != 0 {
			o.Protocol = opt.Protocol
		}
		o.MaxRetries = opt.MaxRetries
		o.ClientName = opt.ClientName
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

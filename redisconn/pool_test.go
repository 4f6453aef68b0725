package redisconn_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

func TestNewPool(t *testing.T) {
	t.Run("reaches the server of its URL", func(t *testing.T) {
		pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if pool.MaxIdle != 64 {
			t.Errorf("MaxIdle %d, want the default 64", pool.MaxIdle)
		}
		c, err := pool.GetContext(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Do("PING"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a server not in cluster mode is not taken for one", func(t *testing.T) {
		pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if on, err := redisconn.ClusterMode(context.Background(), pool); err != nil || on {
			t.Fatalf("ClusterMode = %v, %v; want false", on, err)
		}
	})
	for _, c := range []struct {
		name  string
		url   string
		opts  redisconn.Options
		field string
	}{
		{"refuses a URL that is not redis:// or rediss://", "http://localhost:6379", redisconn.Options{}, "url"},
		{"refuses a negative MaxIdle", "redis://localhost:6379", redisconn.Options{MaxIdle: -1}, "Options.MaxIdle"},
		{"refuses a negative MaxActive", "redis://localhost:6379", redisconn.Options{MaxActive: -1}, "Options.MaxActive"},
		{"refuses a negative ConnectTimeout", "redis://localhost:6379", redisconn.Options{ConnectTimeout: -1}, "Options.ConnectTimeout"},
		{"refuses a negative SentinelCheck", "redis://localhost:6379", redisconn.Options{SentinelCheck: -1}, "Options.SentinelCheck"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := redisconn.NewPool(c.url, &c.opts)
			var ie *worqr.InvalidError
			if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, worqr.ErrInvalid) {
				t.Fatalf("err %v, want an InvalidError of %s", err, c.field)
			}
		})
	}
}

func TestNewCluster(t *testing.T) {
	for _, c := range []struct {
		name  string
		seeds []string
	}{
		{"refuses no seed", []string{" ", ""}},
		{"refuses a seed that is not host:port", []string{"localhost"}},
		{"refuses a scheme other than redis or rediss", []string{"http://localhost:7000"}},
		{"refuses a database other than 0", []string{"redis://localhost:7000/3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := redisconn.NewCluster(c.seeds, nil)
			var ie *worqr.InvalidError
			if !errors.As(err, &ie) || ie.Field != "seeds" {
				t.Fatalf("err %v, want an InvalidError of seeds", err)
			}
		})
	}
}

func TestParseSentinel(t *testing.T) {
	t.Run("splits the master's name from the sentinels", func(t *testing.T) {
		master, sentinels, err := redisconn.ParseSentinel("mymaster@10.0.0.1:26379, 10.0.0.2:26379,")
		if err != nil || master != "mymaster" || len(sentinels) != 2 || sentinels[1] != "10.0.0.2:26379" {
			t.Fatalf("got %q %q %v", master, sentinels, err)
		}
	})
	for _, s := range []string{"10.0.0.1:26379", "@10.0.0.1:26379", "mymaster@", "my/master@10.0.0.1:26379"} {
		t.Run("refuses "+s, func(t *testing.T) {
			if _, _, err := redisconn.ParseSentinel(s); !errors.Is(err, worqr.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
	t.Run("NewSentinel refuses an empty master name", func(t *testing.T) {
		_, err := redisconn.NewSentinel(" ", []string{"10.0.0.1:26379"}, nil)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != "master" {
			t.Fatalf("err %v, want an InvalidError of master", err)
		}
	})
}

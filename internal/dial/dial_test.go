package dial_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

const secret = "s3cret-Pa55word"

// roundTrip enqueues a task and has a worker run it through pool.
func roundTrip(t *testing.T, pool *redis.Pool) {
	t.Helper()
	ctx := context.Background()
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			done <- string(t.Payload)
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	if _, err := c.Enqueue(ctx, "q", []byte("over the wire"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got != "over the wire" {
			t.Fatalf("payload %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("task not run")
	}
}

func TestACLUser(t *testing.T) {
	s, _, err := redistest.StartSecure("worqr", secret, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	pool, err := dial.Pool(dial.Options{URL: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	roundTrip(t, pool)

	// A wrong password fails, and no error names the password.
	bad := strings.Replace(s.URL, secret, "wrong-"+secret, 1)
	badPool, err := dial.Pool(dial.Options{URL: bad})
	if err != nil {
		t.Fatal(err)
	}
	defer badPool.Close()
	_, err = badPool.GetContext(context.Background())
	if err == nil {
		t.Fatal("dial with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the password: %v", err)
	}
	if got := dial.Redact(s.URL); strings.Contains(got, secret) || !strings.Contains(got, "worqr:xxxxx@") {
		t.Fatalf("Redact(%q) = %q", s.URL, got)
	}
	// The default user is off: no credentials, no access.
	anon, _ := dial.Pool(dial.Options{URL: "redis://" + s.Addr})
	defer anon.Close()
	if c, err := anon.GetContext(context.Background()); err == nil {
		_, err = c.Do("SET", "x", "y")
		c.Close()
		if err == nil {
			t.Fatal("the server accepted an anonymous write")
		}
	}
}

func TestTLSWithClientCertAndACL(t *testing.T) {
	s, files, err := redistest.StartSecure("worqr", secret, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if !strings.HasPrefix(s.URL, "rediss://") {
		t.Fatalf("URL %q is not rediss://", s.URL)
	}
	pool, err := dial.Pool(dial.Options{URL: s.URL, CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	roundTrip(t, pool)

	// Without the client certificate the server refuses the connection.
	noCert, err := dial.Pool(dial.Options{URL: s.URL, CAFile: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if c, err := noCert.GetContext(context.Background()); err == nil {
		_, err = c.Do("PING")
		c.Close()
		if err == nil {
			t.Fatal("TLS server accepted a client without a certificate")
		}
	}
	// Without the CA the server's certificate is not trusted.
	noCA, _ := dial.Pool(dial.Options{URL: s.URL, CertFile: files.ClientCert, KeyFile: files.ClientKey})
	defer noCA.Close()
	if _, err := noCA.GetContext(context.Background()); err == nil {
		t.Fatal("dial trusted a server certificate signed by an unknown CA")
	} else if strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		o    dial.Options
		want string
	}{
		{dial.Options{URL: ""}, "is empty"},
		{dial.Options{URL: "http://h"}, "\"http://h\": scheme must be redis or rediss"},
		{dial.Options{URL: "redis://u:" + secret + "@h", CAFile: "/x"}, "not rediss://"},
		{dial.Options{URL: "rediss://h", CertFile: "/x"}, "needs both"},
		{dial.Options{URL: "rediss://h", CAFile: "/nonexistent"}, "TLS CA file"},
	} {
		err := tc.o.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want %q", tc.o, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Check error leaks the password: %v", err)
		}
	}
}

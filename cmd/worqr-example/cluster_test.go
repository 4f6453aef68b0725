package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// TestClusterEnqueueWorkerStats runs enqueue, worker and stats unchanged on
// a local 3-master Redis Cluster named by WORQR_REDIS_CLUSTER.
func TestClusterEnqueueWorkerStats(t *testing.T) {
	cl, err := redistest.StartCluster(3)
	if errors.Is(err, redistest.ErrNoRedisCLI) {
		t.Skip(redistest.ClusterHint)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	ns := "t-" + t.Name()
	e := env{envRedisCluster: strings.Join(cl.Addrs()[:2], ","), envNamespace: ns}

	for _, q := range []string{"alpha", "beta", "gamma"} {
		if code, _, stderr := runArgs(t, e, "enqueue", "--queue", q, "--count", "4", "--batch", "--payload", "x"); code != 0 {
			t.Fatalf("enqueue %s: exit %d: %s", q, code, stderr)
		}
	}
	code, stdout, _ := runArgs(t, e, "stats")
	for _, q := range []string{"alpha", "beta", "gamma"} {
		if code != 0 || !regexp.MustCompile(`(?m)^queue `+q+` waiting 4 `).MatchString(stdout) {
			t.Fatalf("stats before the worker: exit %d:\n%s", code, stdout)
		}
	}

	lr := newLineReader()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	exited := make(chan int)
	go func() {
		exited <- run(ctx, []string{"worker", "--queues", "alpha,beta,gamma", "--concurrency", "2", "--work-time", "5ms", "--grace", "2s"},
			stdio{out: lr.w, err: &errb, getenv: e.get})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("worker exit code %d; stderr:\n%s", code, errb.String())
		}
		lr.w.Close()
	})
	done := 0
	for done < 12 {
		select {
		case l := <-lr.lines:
			if strings.HasPrefix(l, "done ") {
				done++
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d tasks done; stderr:\n%s", done, errb.String())
		}
	}
	code, stdout, _ = runArgs(t, e, "stats")
	for _, q := range []string{"alpha", "beta", "gamma"} {
		if code != 0 || !regexp.MustCompile(`(?m)^queue `+q+` waiting 0 scheduled 0 active 0 dead 0 `).MatchString(stdout) {
			t.Fatalf("stats after the worker: exit %d:\n%s", code, stdout)
		}
	}
	if !strings.Contains(stdout, "workers 1\n") {
		t.Errorf("stats: want one worker:\n%s", stdout)
	}
	// A URL and a cluster at once is a usage error.
	if code, _, stderr := runArgs(t, env{envRedisCluster: cl.Addrs()[0], envRedisURL: "redis://x:1"}, "stats"); code != 2 || !strings.Contains(stderr, "not both") {
		t.Errorf("URL and cluster: exit %d: %s", code, stderr)
	}
}

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

// The CLI given one node of a Redis Cluster as its URL (as other Redis
// tools are pointed at a cluster) follows the whole cluster: it answered
// raw "MOVED <slot> <addr>" for the keys of the other masters (found by an
// audit). The queues are named so that their slots fall on different
// masters.
func TestRedisURLOfAClusterNode(t *testing.T) {
	t.Parallel()
	cl, err := redistest.StartCluster(3)
	if errors.Is(err, redistest.ErrNoRedisCLI) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	b := &bundle{t: t, ns: "cluster-url"}
	env := []string{"WORQR_REDIS_URL=redis://" + cl.Nodes[0].Addr, "WORQR_NAMESPACE=" + b.ns}
	for _, q := range []string{"emails", "orders", "reports", "thumbs"} {
		if r := b.runEnv(env, "", "enqueue", q, "x"); r.code != 0 {
			t.Fatalf("worqr enqueue %s against a cluster node: exit %d, %s", q, r.code, strings.TrimSpace(r.err))
		}
	}
	r := b.runEnv(env, "", "queue", "ls")
	if r.code != 0 {
		t.Fatalf("worqr queue ls against a cluster node: exit %d, %s", r.code, strings.TrimSpace(r.err))
	}
	for _, q := range []string{"emails", "orders", "reports", "thumbs"} {
		if !strings.Contains(r.out, q) {
			t.Errorf("queue ls does not list %s:\n%s", q, r.out)
		}
	}
}

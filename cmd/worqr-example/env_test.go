package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

func TestReadReplication(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      env
		replicas int
		timeout  time.Duration
		err      string // substring; "" means no error
	}{
		{name: "unset", env: env{}},
		{name: "empty", env: env{envReplicas: " ", envReplicaTimeout: ""}},
		{name: "zero", env: env{envReplicas: "0"}},
		{name: "one, default timeout", env: env{envReplicas: "1"}, replicas: 1},
		{name: "two with a timeout", env: env{envReplicas: " 2 ", envReplicaTimeout: "250ms"}, replicas: 2, timeout: 250 * time.Millisecond},
		{name: "largest timeout", env: env{envReplicas: "1", envReplicaTimeout: "4s"}, replicas: 1, timeout: 4 * time.Second},
		{name: "not a number", env: env{envReplicas: "one"}, err: `WORQR_REPLICAS: "one" is not a whole number`},
		{name: "fraction", env: env{envReplicas: "1.5"}, err: `WORQR_REPLICAS: "1.5" is not a whole number`},
		{name: "negative", env: env{envReplicas: "-1"}, err: `WORQR_REPLICAS: "-1" must not be negative`},
		{name: "timeout not a duration", env: env{envReplicas: "1", envReplicaTimeout: "500"}, err: `WORQR_REPLICA_TIMEOUT: "500" is not a duration`},
		{name: "timeout too long", env: env{envReplicas: "1", envReplicaTimeout: "5s"}, err: `WORQR_REPLICA_TIMEOUT: "5s" must be between 1ms and 4s`},
		{name: "timeout too short", env: env{envReplicas: "1", envReplicaTimeout: "500us"}, err: `WORQR_REPLICA_TIMEOUT: "500us" must be between 1ms and 4s`},
		{name: "timeout zero", env: env{envReplicas: "1", envReplicaTimeout: "0s"}, err: "WORQR_REPLICA_TIMEOUT"},
		{name: "timeout without replicas", env: env{envReplicaTimeout: "1s"}, err: `WORQR_REPLICA_TIMEOUT: "1s" applies only with WORQR_REPLICAS above 0`},
		{name: "timeout with zero replicas", env: env{envReplicas: "0", envReplicaTimeout: "1s"}, err: "applies only with WORQR_REPLICAS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := readReplication(tc.env.get)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one holding %q", err, tc.err)
				}
				if _, ok := err.(*usageError); !ok {
					t.Errorf("error %T, want a usage error (exit 2)", err)
				}
				return
			}
			if err != nil || r.Replicas != tc.replicas || r.Timeout != tc.timeout {
				t.Fatalf("got %+v, %v; want %d replicas, timeout %s", r, err, tc.replicas, tc.timeout)
			}
		})
	}
}

// Bad values stop every subcommand that writes before it dials (exit 2,
// the variable named); the demo refuses a wait on its embedded Redis.
func TestReplicationUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		env    env
		stderr string
	}{
		{[]string{"worker", "--redis-url", "redis://127.0.0.1:1"}, env{envReplicas: "x"}, `WORQR_REPLICAS: "x" is not a whole number`},
		{[]string{"enqueue", "--redis-url", "redis://127.0.0.1:1"}, env{envReplicas: "1", envReplicaTimeout: "1h"}, `WORQR_REPLICA_TIMEOUT: "1h" must be between`},
		{[]string{"flow", "--redis-url", "redis://127.0.0.1:1"}, env{envReplicaTimeout: "1s"}, "applies only with WORQR_REPLICAS"},
		{[]string{"consumer", "--redis-url", "redis://127.0.0.1:1"}, env{envReplicas: "-2"}, "WORQR_REPLICAS"},
		{[]string{"demo"}, env{envReplicas: "1"}, "WORQR_REPLICAS: the embedded Redis has no replicas"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			code, _, stderr := runArgs(t, tc.env, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.stderr)
			}
		})
	}
	// The help lists both variables.
	if code, stdout, _ := runArgs(t, env{}, "worker", "--help"); code != 0 || !strings.Contains(stdout, envReplicas) || !strings.Contains(stdout, envReplicaTimeout) {
		t.Errorf("worker --help does not list %s and %s:\n%s", envReplicas, envReplicaTimeout, stdout)
	}
}

// waits returns how many WAIT commands addr has run.
func waits(t *testing.T, addr string) int {
	t.Helper()
	c, err := redis.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_wait:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// With WORQR_REPLICAS, enqueue and the worker wait for the replica of the
// primary (Redis WAIT after each enqueue and each end); without it they
// send no WAIT; asking for more replicas than there are prints the task
// (it is enqueued) and fails naming the variable.
func TestReplicasWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		primary.Stop()
		replicas[0].Stop()
	})
	ns := "t-" + t.Name()
	plain := env{envRedisURL: primary.URL, envNamespace: ns}
	wait := env{envRedisURL: primary.URL, envNamespace: ns, envReplicas: "1", envReplicaTimeout: "3s"}

	enqueue := func(e env, args ...string) []string {
		t.Helper()
		code, stdout, stderr := runArgs(t, e, append([]string{"enqueue", "--queue", "r", "--payload", "x"}, args...)...)
		if code != 0 {
			t.Fatalf("enqueue %v: exit %d: %s", args, code, stderr)
		}
		return strings.Fields(stdout)
	}
	before := waits(t, primary.Addr)
	enqueue(plain, "--count", "2")
	if n := waits(t, primary.Addr); n != before {
		t.Fatalf("enqueue without %s sent %d WAIT", envReplicas, n-before)
	}
	enqueue(wait, "--count", "2")
	if n := waits(t, primary.Addr); n != before+2 {
		t.Fatalf("two enqueues with %s=1 sent %d WAIT, want 2", envReplicas, n-before)
	}
	enqueue(wait, "--count", "3", "--batch")
	afterEnq := waits(t, primary.Addr)
	if afterEnq != before+3 {
		t.Fatalf("a batch enqueue with %s=1 sent %d WAIT, want 1", envReplicas, afterEnq-before-2)
	}

	// The worker's ends wait too (its takes do not).
	lr := startWorkerEnv(t, wait, primary.URL, ns, "--queues", "r", "--concurrency", "2", "--work-time", "1ms")
	for range 7 {
		lr.next(t, "done ")
	}
	if n := waits(t, primary.Addr); n <= afterEnq {
		t.Fatalf("the worker ended 7 tasks with %s=1 and sent no WAIT", envReplicas)
	}

	// Two replicas asked of one: enqueued, printed, and reported (exit 1).
	short := env{envRedisURL: primary.URL, envNamespace: ns, envReplicas: "2", envReplicaTimeout: "20ms"}
	code, stdout, stderr := runArgs(t, short, "enqueue", "--queue", "r2", "--payload", "x")
	if f := strings.Fields(stdout); code != 1 || len(f) != 3 || f[0] != "enqueued" ||
		!strings.Contains(stderr, "not confirmed by the replicas "+envReplicas+" asks for") {
		t.Fatalf("short of replicas: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if code, stdout, _ := runArgs(t, plain, "stats", "--queues", "r2"); code != 0 || !strings.Contains(stdout, "queue r2 waiting 1 ") {
		t.Errorf("the task not confirmed by the replicas is not enqueued: exit %d\n%s", code, stdout)
	}
}

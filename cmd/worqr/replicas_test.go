package main

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

func TestReadReplication(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env      map[string]string
		replicas int
		timeout  time.Duration
		err      string // substring; "" means no error
	}{
		{env: map[string]string{}},
		{env: map[string]string{envReplicas: "0"}},
		{env: map[string]string{envReplicas: "1"}, replicas: 1},
		{env: map[string]string{envReplicas: "2", envReplicaTimeout: "300ms"}, replicas: 2, timeout: 300 * time.Millisecond},
		{env: map[string]string{envReplicas: "x"}, err: `WORQR_REPLICAS: "x" is not a whole number`},
		{env: map[string]string{envReplicas: "-1"}, err: `WORQR_REPLICAS: "-1" must not be negative`},
		{env: map[string]string{envReplicas: "1", envReplicaTimeout: "2"}, err: `WORQR_REPLICA_TIMEOUT: "2" is not a duration`},
		{env: map[string]string{envReplicas: "1", envReplicaTimeout: "10s"}, err: `WORQR_REPLICA_TIMEOUT: "10s" must be between 1ms and 4s`},
		{env: map[string]string{envReplicaTimeout: "1s"}, err: "applies only with WORQR_REPLICAS above 0"},
	} {
		n, d, err := readReplication(func(k string) string { return tc.env[k] })
		if tc.err != "" {
			var ue *usageError
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &ue) {
				t.Errorf("%v: error %v, want a usage error holding %q", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.replicas || d != tc.timeout {
			t.Errorf("%v: got %d, %s, %v; want %d, %s", tc.env, n, d, err, tc.replicas, tc.timeout)
		}
	}
}

// waitCalls returns how many WAIT commands addr has run.
func waitCalls(t *testing.T, addr string) int {
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
	if m := regexp.MustCompile(`cmdstat_wait:calls=(\d+)`).FindStringSubmatch(info); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// With WORQR_REPLICAS, `worqr enqueue` and the gateway (its enqueues and
// its remote workers' ends) wait for the primary's replica; a bad value
// stops the command with exit 2 before it dials.
func TestReplicasEnv(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := b.runEnv([]string{"WORQR_REDIS_URL=redis://127.0.0.1:1", "WORQR_REPLICAS=two"}, "", "enqueue", "q", "x")
	if bad.code != 2 || !strings.Contains(bad.err, `WORQR_REPLICAS: "two" is not a whole number`) {
		t.Errorf("bad WORQR_REPLICAS: exit %d, stderr %q", bad.code, bad.err)
	}
	bad = b.runEnv([]string{"WORQR_REDIS_URL=redis://127.0.0.1:1", "WORQR_REPLICA_TIMEOUT=1s"}, "", "stats")
	if bad.code != 2 || !strings.Contains(bad.err, "WORQR_REPLICA_TIMEOUT") {
		t.Errorf("WORQR_REPLICA_TIMEOUT alone: exit %d, stderr %q", bad.code, bad.err)
	}

	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		primary.Stop()
		replicas[0].Stop()
	})
	base := []string{"WORQR_REDIS_URL=" + primary.URL, "WORQR_NAMESPACE=" + b.ns}
	wait := append(base[:2:2], "WORQR_REPLICAS=1", "WORQR_REPLICA_TIMEOUT=3s")
	enqueue := func(env []string) result {
		t.Helper()
		return b.runEnv(env, "", "enqueue", "mail", "x")
	}
	before := waitCalls(t, primary.Addr)
	if r := enqueue(base); r.code != 0 || waitCalls(t, primary.Addr) != before {
		t.Fatalf("enqueue without WORQR_REPLICAS: exit %d (%s), %d WAIT", r.code, r.err, waitCalls(t, primary.Addr)-before)
	}
	if r := enqueue(wait); r.code != 0 || waitCalls(t, primary.Addr) != before+1 {
		t.Fatalf("enqueue with WORQR_REPLICAS=1: exit %d (%s), %d WAIT, want 1", r.code, r.err, waitCalls(t, primary.Addr)-before)
	}
	r := enqueue(append(base[:2:2], "WORQR_REPLICAS=2", "WORQR_REPLICA_TIMEOUT=20ms"))
	if r.code != 1 || len(strings.Fields(r.out)) != 1 || !strings.Contains(r.err, "not confirmed by the replicas WORQR_REPLICAS asks for") {
		t.Fatalf("two replicas asked of one: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.err)
	}

	// The gateway: an enqueue, then a remote worker's take and finish.
	cmd := exec.Command(binPath, "gateway", "--addr", "127.0.0.1:0", "--grace", "1s")
	cmd.Env = append(cleanEnv(), wait...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(stderr)
	if !sc.Scan() {
		t.Fatal("no output from worqr gateway")
	}
	m := regexp.MustCompile(`on (http://\S+)`).FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("no address in %q", sc.Text())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	call := func(method, body string) map[string]any {
		t.Helper()
		return gatewayCall(ctx, t, m[1], "", method, body)
	}
	before = waitCalls(t, primary.Addr)
	call("Enqueue", `{"queue":"remote","payload":"eA=="}`)
	afterEnq := waitCalls(t, primary.Addr)
	if afterEnq != before+1 {
		t.Fatalf("the gateway's enqueue sent %d WAIT, want 1", afterEnq-before)
	}
	sid, _ := call("OpenSession", `{"name":"t","queues":["remote"]}`)["sessionId"].(string)
	taken := call("Take", `{"sessionId":"`+sid+`","queue":"remote","max":1,"waitMs":5000}`)
	ts, _ := taken["takings"].([]any)
	if len(ts) != 1 {
		t.Fatalf("take: %v", taken)
	}
	pid, _ := ts[0].(map[string]any)["pid"].(string)
	afterTake := waitCalls(t, primary.Addr)
	if out := call("Finish", `{"sessionId":"`+sid+`","pid":"`+pid+`"}`); out["outcome"] != "done" {
		t.Fatalf("finish: %v", out)
	}
	if n := waitCalls(t, primary.Addr); n <= afterTake {
		t.Fatalf("the remote's finish sent no WAIT")
	}
}

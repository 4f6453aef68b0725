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
	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/internal/redistest"
)

// The environment block (every WORQR_* variable) is printed once, by
// worqr --help; every other command's --help points there instead of
// repeating its 20 lines.
func TestEnvironmentBlockOnlyInRootHelp(t *testing.T) {
	b := setup(t)
	const marker = "WORQR_TLS_CA_FILE" // a line of the block only
	if out := b.ok("", "--help"); strings.Count(out, marker) != 1 || !strings.Contains(out, "Environment") {
		t.Errorf("worqr --help: want the environment block once, got:\n%s", out)
	}
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			p := append(append([]string(nil), path...), sub.Name())
			paths = append(paths, p)
			walk(sub, p)
		}
	}
	walk(newRoot(newEnv()), nil)
	if len(paths) < 30 {
		t.Fatalf("found only %d commands: %v", len(paths), paths)
	}
	for _, p := range paths {
		out := b.ok("", append(p, "--help")...)
		if strings.Contains(out, marker) {
			t.Errorf("worqr %s --help repeats the environment block", strings.Join(p, " "))
		}
		if p[0] != "version" && p[0] != "completion" && !strings.Contains(out, "'worqr --help' lists them") {
			t.Errorf("worqr %s --help does not point at worqr --help for the environment:\n%s", strings.Join(p, " "), out)
		}
	}
}

// A command's events and history counts are published before it exits (a
// publication would otherwise come one EventInterval later, after the
// process is gone).
func TestCommandPublishesBeforeExit(t *testing.T) {
	b := setup(t)
	b.ok("", "enqueue", "hq", "hello")
	b.ok("hi\nho\n", "load", "-", "--queue", "hq", "--name", "n")
	c := b.pool.Get()
	defer c.Close()
	keys, err := redis.Strings(c.Do("KEYS", b.ns+":{reg}:hist:*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		v, _ := redis.Int(c.Do("HGET", k, "hq|enqueued"))
		n += v
	}
	if n != 3 {
		t.Fatalf("history counts %d tasks enqueued into hq, want 3 (1 enqueued, 2 loaded)", n)
	}
}

func TestRedisURLIsRequiredAndItsPasswordNeverShown(t *testing.T) {
	b := setup(t)
	r := b.runEnv(nil, "", "stats")
	if r.code != 2 || !strings.Contains(r.err, "--redis-url is required (or set WORQR_REDIS_URL)") {
		t.Errorf("no URL: exit %d, stderr %q", r.code, r.err)
	}
	// The flag wins over the variable; the namespace comes from the flag too.
	b.enqueue("emails", "a")
	r = b.runEnv([]string{"WORQR_REDIS_URL=redis://127.0.0.1:1"}, "", "stats", "--redis-url", redisURL, "--namespace", b.ns)
	if r.code != 0 || !strings.Contains(r.out, "emails") {
		t.Errorf("flags over env: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	cmd := b.run("", "--help")
	if strings.Contains(cmd.out, redisURL) {
		t.Errorf("--help shows the Redis URL from the environment:\n%s", cmd.out)
	}
	r = b.run("", "stats", "--redis-url", "redis://u:hunter2@127.0.0.1:1")
	if r.code != 1 || strings.Contains(r.err, "hunter2") || !strings.Contains(r.err, "cannot reach Redis") {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
}

func TestSentinelVariable(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		env  []string
		want string
		code int
	}{
		{[]string{"WORQR_REDIS_SENTINEL=127.0.0.1:26379"}, "want master-name@host:port,host:port", 2},
		{[]string{"WORQR_REDIS_SENTINEL=m@", "X=1"}, "names no sentinel", 2},
		{[]string{"WORQR_REDIS_SENTINEL=m@127.0.0.1:1", "WORQR_REDIS_URL=" + redisURL}, "set one of WORQR_REDIS_URL, WORQR_REDIS_CLUSTER and WORQR_REDIS_SENTINEL", 2},
		{[]string{"WORQR_REDIS_SENTINEL=m@redis://u:hunter2@127.0.0.1:1"}, "cannot reach the primary m of the sentinels at redis://u:xxxxx@127.0.0.1:1", 1},
	} {
		r := b.runEnv(c.env, "", "stats")
		if r.code != c.code || !strings.Contains(r.err, c.want) || strings.Contains(r.err, "hunter2") {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.env, r.code, r.err, c.code, c.want)
		}
	}
}

// Sentinels that require a password are reached with WORQR_SENTINEL_USER
// and WORQR_SENTINEL_PASSWORD; without them the CLI cannot log in (found
// by an audit: nothing set them), and the password is never shown.
func TestSentinelPassword(t *testing.T) {
	b := setup(t)
	primary, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Stop)
	s, err := redistest.StartAuthSentinel(primary, "s3ntinel")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(s.Stop)
	env := []string{"WORQR_REDIS_SENTINEL=" + redistest.SentinelMaster + "@" + s.Addr, "WORQR_NAMESPACE=" + b.ns}
	if r := b.runEnv(env, "", "enqueue", "q", "x"); r.code == 0 || !strings.Contains(r.err, "NOAUTH") {
		t.Fatalf("without the sentinel's password: exit %d, %q; want it refused (NOAUTH)", r.code, r.err)
	}
	r := b.runEnv(append(env, "WORQR_SENTINEL_PASSWORD=s3ntinel"), "", "enqueue", "q", "x")
	if r.code != 0 {
		t.Fatalf("with WORQR_SENTINEL_PASSWORD: exit %d, %s", r.code, r.err)
	}
	if strings.Contains(r.out+r.err, "s3ntinel") {
		t.Errorf("the output shows the password: %s %s", r.out, r.err)
	}
}

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

func TestQueuePauseRefusesAnUnknownQueue(t *testing.T) {
	b := setup(t)
	b.enqueue("emails", "a")
	r := b.run("", "queue", "pause", "emials")
	if r.code != 1 || !strings.Contains(r.err, `queue "emials" is not known`) {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
	if qi := b.queue("emials"); qi.Paused {
		t.Error("the unknown queue was paused anyway")
	}
	// The listings refuse a queue name with a typo too, rather than print
	// nothing and exit 0.
	for _, args := range [][]string{{"task", "ls", "emials"}, {"dead", "ls", "emials"}, {"dead", "errors", "emials"},
		{"queue", "history", "emials"}} {
		if r := b.run("", args...); r.code != 1 || !strings.Contains(r.err, `queue "emials" is not known`) {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.err)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// stats --watch survives a Redis blip: it says the connection is lost,
// keeps trying, and goes on once Redis answers again (it died with
// "worqr stats: queues: EOF").
func TestStatsWatchSurvivesARedisBlip(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start("--save", "") // its own server: the test kills it
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ns := "clitest-watch"
	enqueue := func(n int) {
		t.Helper()
		pool := srv.Pool()
		defer pool.Close()
		c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := c.Enqueue(context.Background(), "emails", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}
		c.Flush()
	}
	enqueue(1)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "stats", "--watch", "--interval", "100ms", "-o", "json")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+srv.URL, "WORQR_NAMESPACE="+ns)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan int64, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var qs []queueStats
			if json.Unmarshal(sc.Bytes(), &qs) == nil && len(qs) == 1 {
				waiting <- qs[0].Waiting
			}
		}
	}()
	var (
		mu     sync.Mutex
		errOut strings.Builder
	)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			errOut.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	said := func(what string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(errOut.String(), what)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for !cond() {
			select {
			case err := <-exited:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("stats --watch exited (%v) before %s; stderr:\n%s", err, what, errOut.String())
			case <-deadline:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("timed out waiting for %s; stderr:\n%s", what, errOut.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	sees := func(n int64) func() bool {
		return func() bool {
			for {
				select {
				case w := <-waiting:
					if w == n {
						return true
					}
				default:
					return false
				}
			}
		}
	}
	until("a snapshot with 1 waiting", sees(1))

	srv.Kill()
	until("the loss reported", said("worqr stats: lost the connection to Redis ("))
	if err := srv.Restart(); err != nil { // empty again: no persistence
		t.Fatal(err)
	}
	enqueue(2)
	until("a snapshot of the restarted server", sees(2))
	until("the return reported", said("worqr stats: Redis answers again, after "))

	_ = cmd.Process.Signal(os.Interrupt)
	if err := <-exited; err != nil {
		t.Errorf("stats --watch after an interrupt: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(errOut.String(), "lost the connection"); n != 1 {
		t.Errorf("the loss was reported %d times, want once:\n%s", n, errOut.String())
	}
}

func TestStatsWatchPrintsSnapshotsUntilInterrupted(t *testing.T) {
	b := setup(t)
	b.enqueue("emails", "a")
	// Not a terminal: one JSON list per line, twice, then stop the reading
	// side: the process is killed by the test's context at worst.
	out := b.runLines(2, "stats", "--watch", "--interval", "100ms", "-o", "json")
	for _, l := range out {
		var qs []queueStats
		if err := json.Unmarshal([]byte(l), &qs); err != nil || len(qs) != 1 || qs[0].Waiting != 1 {
			t.Errorf("snapshot %q: %v %+v", l, err, qs)
		}
	}
}

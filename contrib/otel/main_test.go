package otelworqr_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests run against a real redis-server: TestMain starts a private one
// (or uses WORQR_TEST_REDIS_URL). The root module's internal/redistest is
// out of reach from this module, hence the copy of cmd/worqr's startRedis
// (as in contrib/prometheus).
var redisURL string

const installHint = "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis) or set WORQR_TEST_REDIS_URL"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if redisURL = os.Getenv("WORQR_TEST_REDIS_URL"); redisURL == "" {
		dir, err := os.MkdirTemp("", "worqr-otel-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer os.RemoveAll(dir)
		stop, url, err := startRedis(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "redis:", err)
			return 2
		}
		defer stop()
		redisURL = url
	}
	return m.Run()
}

// startRedis starts a private redis-server on a free loopback port with
// persistence off, and waits until it says it is ready.
func startRedis(dir string) (stop func(), url string, err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, "", errors.New(installHint)
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--protected-mode", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var log []string
		for sc.Scan() {
			log = append(log, sc.Text())
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- nil
				for sc.Scan() { // keep draining so the server never blocks on its log
				}
				return
			}
		}
		ready <- fmt.Errorf("redis-server exited before it was ready:\n%s", strings.Join(log, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			return nil, "", err
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", errors.New("redis-server did not start within 20s")
	}
	return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, fmt.Sprintf("redis://127.0.0.1:%d", port), nil
}

// freePort returns a loopback port nothing listens on (now).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// eventually polls cond every 20ms until it returns "" or the deadline
// passes, then fails with its last message.
func eventually(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

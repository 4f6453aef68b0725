package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDashServesWithBasicAuthAndStopsOnSIGINT runs `worqr dash` on a free
// port: the overview needs the basic-auth credentials from the environment,
// shows the namespace's queue under --prefix, never shows the Redis URL,
// and SIGINT stops the server with exit 0.
// getPath GETs url with basic-auth credentials (none when user is "").
func getPath(t *testing.T, url, user, pass string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestDashServesWithBasicAuthAndStopsOnSIGINT(t *testing.T) {
	b := setup(t)
	if _, err := b.client.Enqueue(context.Background(), "mail", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "dash", "--addr", "127.0.0.1:0", "--prefix", "/ops", "--read-only")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns,
		"WORQR_DASH_USER=ops", "WORQR_DASH_PASSWORD=pw")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	if !sc.Scan() {
		t.Fatal("no output from worqr dash")
	}
	m := regexp.MustCompile(`on (http://\S+)`).FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("no address in %q", sc.Text())
	}
	base := m[1]
	get := func(user, pass string) (int, string) { return getPath(t, base, user, pass) }
	getMetrics := func(user, pass string) (int, string) {
		return getPath(t, strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/ops")+"/metrics", user, pass)
	}
	if code, _ := getMetrics("", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without credentials: %d, want 401", code)
	}
	if code, body := getMetrics("ops", "pw"); code != 200 || !strings.Contains(body, "worqr_up 1") ||
		!strings.Contains(body, `worqr_queue_waiting{queue="mail"} 1`) {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Fatalf("without credentials: %d, want 401", code)
	}
	if code, _ := get("ops", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d, want 401", code)
	}
	code, body := get("ops", "pw")
	if code != 200 || !strings.Contains(body, `href="/ops/queue?name=mail"`) || !strings.Contains(body, "read-only") {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	if strings.Contains(body, redisURL) || strings.Contains(body, strings.TrimPrefix(redisURL, "redis://")) {
		t.Fatal("the dashboard shows the Redis URL")
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worqr dash after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worqr dash did not stop within 10s of SIGINT")
	}
}

// TestDashRefusesAPrefixThatIsNotAPlainPath: a --prefix with a space made
// the server's mux panic (a stack trace, exit 2 without the flag named); one
// with {braces} served a wildcard pattern the dashboard never matched.
func TestDashRefusesAPrefixThatIsNotAPlainPath(t *testing.T) {
	b := setup(t)
	for _, p := range []string{"/ops team", "/ops/{id}"} {
		r := b.runQuick(5*time.Second, "dash", "--addr", "127.0.0.1:0", "--prefix", p)
		if r.code != 2 || !strings.Contains(r.err, "--prefix") || strings.Contains(r.err, "panic") {
			t.Errorf("dash --prefix %q: exit %d, stderr %q; want exit 2 naming --prefix", p, r.code, r.err)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatewayServesWithTokenAndStopsOnSIGTERM runs `worqr gateway` on a free
// port: a call without the token is refused, one with it enqueues into the
// namespace, and SIGTERM drains and stops it with exit 0.
func TestGatewayServesWithTokenAndStopsOnSIGTERM(t *testing.T) {
	b := setup(t)
	cmd := exec.Command(binPath, "gateway", "--addr", "127.0.0.1:0", "--grace", "1s", "--retention", "1m")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns, "WORQR_GATEWAY_TOKEN=tok")
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
		t.Fatal("no output from worqr gateway")
	}
	m := regexp.MustCompile(`on (http://\S+)`).FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("no address in %q", sc.Text())
	}
	post := func(auth string) int {
		req, _ := http.NewRequest("POST", m[1]+"/worqr.gateway.v1.GatewayService/Enqueue", strings.NewReader(`{"queue":"mail","payload":"eA=="}`))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code := post("Bearer tok"); code != 200 {
		t.Fatalf("with the token: %d, want 200", code)
	}
	if qi, err := b.in.Queue(context.Background(), "mail"); err != nil || qi.Waiting != 1 {
		t.Fatalf("mail holds %+v (%v), want the enqueued task waiting", qi, err)
	}
	// A remote worker runs it; --retention keeps its result readable.
	call := func(method, body string) map[string]any {
		t.Helper()
		return gatewayCall(context.Background(), t, m[1], "tok", method, body)
	}
	sid := call("OpenSession", `{"queues":["mail"]}`)["sessionId"]
	takings, _ := call("Take", fmt.Sprintf(`{"sessionId":%q,"queue":"mail","max":1}`, sid))["takings"].([]any)
	if len(takings) != 1 {
		t.Fatalf("take: %v", takings)
	}
	k := takings[0].(map[string]any)
	call("Finish", fmt.Sprintf(`{"sessionId":%q,"pid":%q,"result":"cg=="}`, sid, k["pid"]))
	task, _ := call("GetTask", fmt.Sprintf(`{"queue":"mail","id":%q}`, k["taskId"]))["task"].(map[string]any)
	if task["state"] != "done" || task["result"] != "cg==" {
		t.Fatalf("task after its finish: %v, want done with its result (--retention 1m)", task)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worqr gateway after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worqr gateway did not stop within 15s of SIGTERM")
	}
}

func TestGatewayRejectsHalfTLS(t *testing.T) {
	b := setup(t)
	r := b.run("", "gateway", "--tls-cert", "cert.pem")
	if r.code != 2 || !strings.Contains(r.err, "--tls-cert and --tls-key go together") {
		t.Errorf("exit %d, stderr %q; want 2 naming both flags", r.code, r.err)
	}
}

// gatewayCall makes one JSON call of method to the gateway at base (with
// token, when not "") and returns its reply; any status but 200 fails t.
func gatewayCall(ctx context.Context, t *testing.T, base, token, method, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/worqr.gateway.v1.GatewayService/"+method, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
		t.Fatalf("%s: status %d, %v, %v", method, res.StatusCode, out, err)
	}
	return out
}

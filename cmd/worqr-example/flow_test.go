package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/worqr"
)

func TestFlowUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "flow help", args: []string{"flow", "--help"}, stdout: "started <run_id>"},
		{name: "worker help names the flow lines", args: []string{"worker", "--help"}, stdout: "fanned_out <stage> <run_id>"},
		{name: "flow needs redis", args: []string{"flow"}, code: 2, stderr: "--redis-url is required"},
		{name: "bad count", args: []string{"flow", "--redis-url", "redis://x", "--count", "0"}, code: 2, stderr: "--count (0)"},
		{name: "bad child work time", args: []string{"worker", "--redis-url", "redis://x", "--flow", "--child-work-time", "-1s"}, code: 2, stderr: "--child-work-time (-1s)"},
		{name: "empty queues need --flow", args: []string{"worker", "--redis-url", "redis://x", "--queues", ""}, code: 2, stderr: "--queues"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, env{}, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout does not hold %q:\n%s", tc.stdout, stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr does not hold %q:\n%s", tc.stderr, stderr)
			}
		})
	}
}

func TestFlowEventLine(t *testing.T) {
	for _, tc := range []struct {
		e    worqr.Event
		want string
	}{
		{worqr.Event{Kind: worqr.EventForwarded, Queue: "access-check", TaskID: "r1"}, "forwarded access-check r1"},
		{worqr.Event{Kind: worqr.EventFannedOut, Queue: "manage-reward", TaskID: "r1"}, "fanned_out manage-reward r1"},
		{worqr.Event{Kind: worqr.EventDone, Queue: "notify", TaskID: "r1"}, ""},
	} {
		if got := strings.Join(flowEventLine(tc.e), " "); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.e.Kind, got, tc.want)
		}
	}
}

// TestWorkerFlow runs a flow run through the worker subcommand, started by
// the flow subcommand, and checks the lines and the run's state.
func TestWorkerFlow(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + t.Name()
	lr := startWorker(t, url, ns, "--flow", "--queues", "", "--concurrency", "2", "--work-time", "10ms", "--child-work-time", "20ms")
	lr.next(t, "registered ")

	code, stdout, stderr := runArgs(t, env{envNamespace: ns}, "flow", "--redis-url", url, "--user-id", "u7")
	if code != 0 {
		t.Fatalf("flow: exit %d: %s", code, stderr)
	}
	f := strings.Fields(stdout)
	if len(f) != 2 || f[0] != "started" {
		t.Fatalf("bad flow output %q", stdout)
	}
	id := f[1]

	// The run's lines, in the order the stages run; children in any order.
	want := []string{
		"took access-check " + id + " - 1", "forwarded access-check " + id,
		"took update-membership " + id + " - 1", "forwarded update-membership " + id,
		"took manage-reward " + id + " - 1", "fanned_out manage-reward " + id,
	}
	for _, w := range want {
		if got := strings.Join(lr.next(t, strings.Fields(w)[0]+" "), " "); got != w {
			t.Fatalf("got line %q, want %q", got, w)
		}
	}
	children := map[string]string{} // child id -> queue
	for len(children) < 2 {
		l := lr.next(t, "took ")
		if len(l) != 5 || (l[1] != "discord" && l[1] != "telegram") || l[3] == "-" || l[4] != "1" {
			t.Fatalf("bad child took line %v", l)
		}
		children[l[2]] = l[1]
	}
	// Both children end before the run's last stage does.
	var dones []string
	for len(dones) < 3 {
		dones = append(dones, strings.Join(lr.next(t, "done "), " "))
	}
	for i, d := range dones[:2] {
		l := strings.Fields(d)
		if len(l) != 3 || children[l[2]] != l[1] {
			t.Fatalf("done line %d: %q, want a child's", i, d)
		}
	}
	if dones[0] == dones[1] || dones[2] != "done notify "+id {
		t.Fatalf("done lines %q", dones)
	}

	pool, err := newPool(dial.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	flow := newAccessFlow(accessFlowOpts{concurrency: 1})
	var info *worqr.RunInfo
	for deadline := time.Now().Add(5 * time.Second); ; {
		info, err = c.Run(context.Background(), flow, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != worqr.RunRunning || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if info.Status != worqr.RunDone {
		t.Fatalf("run %s: %+v, want done", id, info)
	}
	if got := renderState(info.State); got != `access=granted membership=member notified="discord=done telegram=done" rewards=discord,telegram userId=u7` {
		t.Errorf("state: %s", got)
	}
	for _, k := range info.Children {
		if k.Status != "done" || string(k.Result) != "granted "+k.Queue+" role to user u7" || children[k.ID] != k.Queue {
			t.Errorf("child %+v", k)
		}
	}
	runs, err := c.FindRuns(context.Background(), flow, "userId", "u7")
	if err != nil || len(runs) != 1 || runs[0].ID != id {
		t.Errorf("FindRuns: %v, %v", runs, err)
	}
}

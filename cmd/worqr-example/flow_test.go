package main

import (
	"context"
	"strings"
	"testing"
	"time"

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

	// Every line up to the run's end. A stage's own event line comes after
	// its finish, so the next stage may already have printed its took line:
	// only orders the protocol guarantees are checked.
	var lines []string
	for {
		f := lr.next(t, "")
		lines = append(lines, strings.Join(f, " "))
		if len(f) == 4 && f[0] == "done" && f[1] == "notify" && f[2] == id && f[3] != "-" {
			break
		}
	}
	at := map[string]int{}
	for i, l := range lines {
		if _, dup := at[l]; dup {
			t.Fatalf("line %q twice in %q", l, lines)
		}
		at[l] = i
	}
	pos := func(l string) int {
		t.Helper()
		i, ok := at[l]
		if !ok {
			t.Fatalf("no line %q in %q", l, lines)
		}
		return i
	}
	stages := []string{"access-check", "update-membership", "manage-reward", "notify"}
	for i, st := range stages {
		took := pos("took " + st + " " + id + " - 1 -")
		if i > 0 && took < pos("took "+stages[i-1]+" "+id+" - 1 -") {
			t.Fatalf("stage %s taken before stage %s: %q", st, stages[i-1], lines)
		}
		switch st {
		case "manage-reward":
			if pos("fanned_out "+st+" "+id) < took {
				t.Fatalf("fanned out before taken: %q", lines)
			}
		case "notify":
		default:
			if pos("forwarded "+st+" "+id) < took {
				t.Fatalf("forwarded before taken: %q", lines)
			}
		}
	}
	// Two children, one per child queue, each taken after the fan-out's
	// stage and before the last stage (a child's done line, like a stage's
	// forwarded line, may follow the next stage's took line).
	children := map[string]string{} // child id -> queue
	childPID := map[string]string{} // child id -> pid of its taking
	for i, l := range lines {
		f := strings.Fields(l)
		if f[0] != "took" || (f[1] != "discord" && f[1] != "telegram") {
			continue
		}
		if len(f) != 6 || f[3] == "-" || f[4] != "1" || f[5] != "0" || i < pos("took manage-reward "+id+" - 1 -") {
			t.Fatalf("bad child took line %q in %q", l, lines)
		}
		children[f[2]] = f[1]
		childPID[f[2]] = f[3]
	}
	if len(children) != 2 {
		t.Fatalf("children %v, want one on discord and one on telegram: %q", children, lines)
	}
	for cid, q := range children {
		pos("done " + q + " " + cid + " " + childPID[cid]) // the pid of its took line
		for _, l := range lines[pos("took notify "+id+" - 1 -"):] {
			if strings.HasPrefix(l, "took "+q+" "+cid+" ") {
				t.Fatalf("child %s taken after the last stage: %q", cid, lines)
			}
		}
	}

	pool, err := newPool(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	flow := newAccessFlow(accessFlowOpts{concurrency: 1})
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := client.WaitRun(wctx, flow, id) // woken by the run's events
	if err != nil {
		t.Fatalf("WaitRun %s: %v", id, err)
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
	runs, err := in.FindRuns(context.Background(), flow, "userId", "u7")
	if err != nil || len(runs) != 1 || runs[0].ID != id {
		t.Errorf("FindRuns: %v, %v", runs, err)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestStatsJSONHasExactlyTheDocumentedFields(t *testing.T) {
	b := setup(t)
	b.bury("emails", "boom")
	b.enqueue("emails", "a", "b", "c")
	b.enqueue("sms", "x")
	if err := b.in.Pause(context.Background(), "sms"); err != nil {
		t.Fatal(err)
	}

	out := b.ok("", "stats", "-o", "json")
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stats -o json is not a JSON list: %v\n%s", err, out)
	}
	if len(raw) != 2 {
		t.Fatalf("want 2 queues, got %d:\n%s", len(raw), out)
	}
	want := []string{"active", "behind", "dead", "latency_ms", "name", "oldest_active_ms", "paused", "scheduled", "waiting"}
	for _, q := range raw {
		var keys []string
		for k := range q {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !reflect.DeepEqual(keys, want) {
			t.Errorf("fields of %v: got %v, want exactly %v", q["name"], keys, want)
		}
	}
	var qs []queueStats
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatal(err)
	}
	if got := qs[0]; got.Name != "emails" || got.Waiting != 3 || got.Dead != 1 || got.Active != 0 || got.Scheduled != 0 || got.Paused {
		t.Errorf("emails: got %+v, want 3 waiting, 1 dead, not paused", got)
	}
	if got := qs[1]; got.Name != "sms" || got.Waiting != 1 || !got.Paused {
		t.Errorf("sms: got %+v, want 1 waiting, paused", got)
	}
	if qs[0].LatencyMs < 0 {
		t.Errorf("latency_ms %d is negative", qs[0].LatencyMs)
	}
}

// A handler that hangs on the head of a key: stats shows the tasks
// waiting behind it (WAITING is 0) and how long it has been running.
func TestStatsShowStuckWork(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"orders": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { started <- struct{}{}; <-release; return nil })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	defer close(release)
	c, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: b.ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(context.Background(), "orders", [][]byte{[]byte("1"), []byte("2"), []byte("3")},
		&worqr.EnqueueOpts{Key: "customer-7"}); err != nil {
		t.Fatal(err)
	}
	<-started
	var qs []queueStats
	redistest.WaitFor(t, 10*time.Second, "stats to show the running task's age", func() bool {
		qs = nil
		return json.Unmarshal([]byte(b.ok("", "stats", "-o", "json")), &qs) == nil && len(qs) == 1 && qs[0].OldestActiveMs >= 2
	})
	if q := qs[0]; q.Waiting != 0 || q.Behind != 2 || q.Active != 1 {
		t.Errorf("stats -o json: %+v; want waiting 0, behind 2, active 1", q)
	}
	lines := strings.Split(strings.TrimRight(b.ok("", "stats"), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "BEHIND") || !strings.Contains(lines[0], "OLDEST_ACTIVE") {
		t.Fatalf("stats table:\n%s", strings.Join(lines, "\n"))
	}
	if f := strings.Fields(lines[1]); len(f) != 9 || f[1] != "0" || f[2] != "2" || f[4] != "1" || f[5] == "0s" {
		t.Errorf("stats row %q; want waiting 0, behind 2, active 1 and a running time", lines[1])
	}
}

func TestStatsJSONOfAnEmptyNamespaceIsAnEmptyList(t *testing.T) {
	b := setup(t)
	if out := strings.TrimSpace(b.ok("", "stats", "-o", "json")); out != "[]" {
		t.Errorf("got %q, want []", out)
	}
}

func TestStatsTableIsAligned(t *testing.T) {
	b := setup(t)
	b.enqueue("emails", "a", "b")
	b.enqueue("a-much-longer-queue-name", "x")
	out := b.ok("", "stats")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows, got:\n%s", out)
	}
	if !strings.HasPrefix(lines[0], "QUEUE") || !strings.Contains(lines[0], "WAITING") || !strings.Contains(lines[0], "LATENCY") {
		t.Errorf("header: %q", lines[0])
	}
	// Every row's WAITING column starts where the header's does.
	col := strings.Index(lines[0], "WAITING")
	for _, l := range lines[1:] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row not aligned with the WAITING column at %d: %q", col, l)
		}
	}
	if !strings.HasPrefix(lines[2], "emails ") || strings.Fields(lines[2])[1] != "2" {
		t.Errorf("emails row: %q", lines[2])
	}
}

// TestHistoryReadsWhatOtherProcessesCounted: the CLI, a process that saw
// none of it, prints the throughput the test's client and worker counted:
// per queue (queue history) and for every queue (stats --history), as JSON
// and as a table with a total row.
func TestHistoryReadsWhatOtherProcessesCounted(t *testing.T) {
	b := setup(t)
	b.enqueue("sms", "x")
	b.bury("emails", "boom", "bang")
	var hs []historyJSON
	redistest.WaitFor(b.t, patience, "the history of emails", func() bool {
		out := b.ok("", "queue", "history", "emails", "--minutes", "3", "-o", "json")
		hs = nil
		if err := json.Unmarshal([]byte(out), &hs); err != nil {
			t.Fatalf("queue history -o json: %v\n%s", err, out)
		}
		var enq, dead int64
		for _, h := range hs {
			enq, dead = enq+h.Enqueued, dead+h.Dead
		}
		return enq == 2 && dead == 2
	})
	if len(hs) != 3 || hs[0].Queues != nil {
		t.Errorf("3 minutes of one queue, without a per-queue breakdown: %+v", hs)
	}
	out := b.ok("", "stats", "--history", "--minutes", "5", "-o", "json")
	if err := json.Unmarshal([]byte(out), &hs); err != nil || len(hs) != 5 {
		t.Fatalf("stats --history -o json: %v\n%s", err, out)
	}
	var all, sms int64
	for _, h := range hs {
		all += h.Enqueued
		sms += h.Queues["sms"].Enqueued
	}
	if all != 3 || sms != 1 {
		t.Errorf("stats --history: %d enqueued (sms %d), want 3 (sms 1)\n%s", all, sms, out)
	}
	table := b.ok("", "stats", "--history", "--minutes", "2")
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "MINUTE") || strings.Join(strings.Fields(lines[3]), " ") != "total 3 0 0 2 0 0 0" {
		t.Errorf("stats --history table: want a header, 2 minutes and the total 3 enqueued 2 dead:\n%s", table)
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

func TestQueuePauseAndResume(t *testing.T) {
	b := setup(t)
	b.enqueue("emails", "a")
	if out := b.ok("", "queue", "pause", "emails"); out != "paused emails\n" {
		t.Errorf("pause printed %q", out)
	}
	if !b.queue("emails").Paused {
		t.Fatal("the Inspector does not see emails paused")
	}
	b.ok("", "queue", "resume", "emails")
	if b.queue("emails").Paused {
		t.Fatal("the Inspector still sees emails paused after resume")
	}
}

func TestQueueLimits(t *testing.T) {
	b := setup(t)
	b.enqueue("emails", "a")
	if out := b.ok("", "queue", "limits", "emails"); out != "limits of emails: none\n" {
		t.Errorf("limits printed %q", out)
	}
	if out := b.ok("", "queue", "limits", "emails", "--rate", "100", "--period", "1s", "--concurrency", "10"); out != "limits of emails: rate 100 per 1s, concurrency 10\n" {
		t.Errorf("limits printed %q", out)
	}
	l, err := b.in.Limits(context.Background(), "emails")
	if err != nil || l != (worqr.Limits{Rate: 100, Period: time.Second, Concurrency: 10}) {
		t.Fatalf("the Inspector sees %+v, %v", l, err)
	}
	if r := b.run("", "queue", "limits", "emails", "--rate", "5"); r.code != 2 || !strings.Contains(r.err, "--rate needs --period") {
		t.Errorf("a rate without a period: exit %d, stderr %q", r.code, r.err)
	}
	if out := b.ok("", "queue", "limits", "emails", "--clear"); out != "limits of emails: none\n" {
		t.Errorf("--clear printed %q", out)
	}
	// A queue not known yet: the flags are checked first (exit 2), setting
	// is refused without --new (a typo), and --new sets them.
	if r := b.run("", "queue", "limits", "api-calls", "--rate", "-1", "--period", "1s"); r.code != 2 || !strings.Contains(r.err, "--rate -1") {
		t.Errorf("a negative rate for an unknown queue: exit %d, stderr %q; want 2", r.code, r.err)
	}
	if r := b.run("", "queue", "limits", "api-calls", "--rate", "100", "--period", "1s"); r.code != 1 || !strings.Contains(r.err, "--new sets its limits") {
		t.Errorf("limits of an unknown queue without --new: exit %d, stderr %q; want 1 and a hint at --new", r.code, r.err)
	}
	if out := b.ok("", "queue", "limits", "api-calls", "--rate", "100", "--period", "1s", "--new"); out != "limits of api-calls: rate 100 per 1s\n" {
		t.Errorf("--new printed %q", out)
	}
	if l, err := b.in.Limits(context.Background(), "api-calls"); err != nil || l.Rate != 100 {
		t.Fatalf("the Inspector sees %+v, %v for the new queue", l, err)
	}
	if out := b.ok("", "queue", "limits", "api-calls"); out != "limits of api-calls: rate 100 per 1s\n" {
		t.Errorf("reading the limits of a queue not known yet printed %q", out)
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

func TestDeadRetryAllMovesEveryDeadTaskBack(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1", "e2", "e3", "e4")
	b.enqueue("emails", "waiting")
	out := b.ok("", "dead", "retry", "emails", "--all", "--yes")
	if !strings.Contains(out, "requeued 4 dead tasks of emails") {
		t.Errorf("stdout %q", out)
	}
	qi := b.queue("emails")
	if qi.Dead != 0 || qi.Waiting != 5 {
		t.Errorf("after retry: %d dead, %d waiting; want 0 and 5", qi.Dead, qi.Waiting)
	}
}

func TestBulkActionsRefuseWithoutYesWhenStdinIsNotATerminal(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1", "e2")
	b.enqueue("emails", "w1", "w2", "w3")
	for _, args := range [][]string{
		{"dead", "retry", "emails", "--all"},
		{"dead", "delete", "emails", "--all"},
		{"queue", "purge", "emails"},
	} {
		r := b.run("y\n", args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2", args, r.code)
		}
		if !strings.Contains(r.err, "without --yes: stdin is not a terminal") {
			t.Errorf("%v: stderr %q does not say why", args, r.err)
		}
		if r.out != "" {
			t.Errorf("%v: stdout %q, want nothing", args, r.out)
		}
	}
	if qi := b.queue("emails"); qi.Dead != 2 || qi.Waiting != 3 {
		t.Errorf("something changed: %d dead, %d waiting; want 2 and 3", qi.Dead, qi.Waiting)
	}
}

func TestDeadRetryNeedsAll(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1")
	r := b.run("", "dead", "retry", "emails", "--yes")
	if r.code != 2 || !strings.Contains(r.err, "--all or --error is required") {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
	if b.queue("emails").Dead != 1 {
		t.Error("the dead task moved")
	}
}

func TestDeadDeleteAllAndPurge(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1", "e2")
	b.enqueue("emails", "w1", "w2", "w3")
	if out := b.ok("", "dead", "delete", "emails", "--all", "--yes"); !strings.Contains(out, "deleted 2 dead tasks") {
		t.Errorf("dead delete: %q", out)
	}
	r := b.run("", "queue", "purge", "emails", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "deleted 3 waiting and scheduled tasks of emails") {
		t.Errorf("purge: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	// Not a terminal: progress comes as plain lines on stderr.
	if !strings.Contains(r.err, "deleted 3 of about 3") {
		t.Errorf("purge printed no progress line on stderr: %q", r.err)
	}
	if qi := b.queue("emails"); qi.Dead != 0 || qi.Waiting != 0 {
		t.Errorf("after delete and purge: %d dead, %d waiting", qi.Dead, qi.Waiting)
	}
}

func TestDeadErrorsGroupsNormalisedErrors(t *testing.T) {
	b := setup(t)
	b.bury("emails",
		"timeout after 3s", "timeout after 5s", "timeout after 12s",
		"user 0f8fad5b-d9cb-469f-a165-70867728950e not found",
		"user 7c9e6679-7425-40de-944b-e07fc1f90ae7 not found",
		"connection refused")
	out := b.ok("", "dead", "errors", "emails", "-o", "json")
	var got struct {
		Total  int
		Groups []struct {
			Error string
			Count int
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err, out)
	}
	type g struct {
		text  string
		count int
	}
	var groups []g
	for _, x := range got.Groups {
		groups = append(groups, g{x.Error, x.Count})
	}
	want := []g{{"timeout after <n>s", 3}, {"user <uuid> not found", 2}, {"connection refused", 1}}
	if !reflect.DeepEqual(groups, want) || got.Total != 6 {
		t.Errorf("groups %v (total %d), want %v (total 6)", groups, got.Total, want)
	}
	table := b.ok("", "dead", "errors", "emails")
	if !strings.Contains(table, "timeout after <n>s") || !strings.HasPrefix(strings.Split(table, "\n")[1], "3 ") {
		t.Errorf("table:\n%s", table)
	}
}

func TestEnqueueFromStdinArgumentAndFile(t *testing.T) {
	b := setup(t)
	id := strings.TrimSpace(b.ok(`{"to":"ada"}`, "enqueue", "emails", "-"))
	ti, err := b.in.Task(context.Background(), "emails", id)
	if err != nil {
		t.Fatalf("the printed id %q is not a task: %v", id, err)
	}
	if string(ti.Payload) != `{"to":"ada"}` {
		t.Errorf("payload %q", ti.Payload)
	}
	id2 := strings.TrimSpace(b.ok("", "enqueue", "emails", "literal"))
	file := filepath.Join(t.TempDir(), "p.bin")
	if err := os.WriteFile(file, []byte{0, 1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	id3 := strings.TrimSpace(b.ok("", "enqueue", "emails", "@"+file))
	for id, want := range map[string]string{id2: "literal", id3: "\x00\x01\x02"} {
		ti, err := b.in.Task(context.Background(), "emails", id)
		if err != nil || string(ti.Payload) != want {
			t.Errorf("task %s: %v, payload %q, want %q", id, err, ti.Payload, want)
		}
	}
	r := b.run("", "enqueue", "emails", "@"+filepath.Join(t.TempDir(), "missing"))
	if r.code != 2 || !strings.Contains(r.err, "<payload> @") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.err)
	}
}

func TestTaskGet(t *testing.T) {
	b := setup(t)
	id := b.enqueue("emails", `{"to":"ada"}`)[0]
	out := b.ok("", "task", "get", "emails", id, "-o", "json")
	var got taskJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err, out)
	}
	if got.ID != id || got.Queue != "emails" || got.State != "queued" || deref(got.Payload) != `{"to":"ada"}` {
		t.Errorf("got %+v", got)
	}
	// Found by id alone in any queue; a table of key value lines.
	table := b.ok("", "task", "get", id)
	for _, want := range []string{"id  ", id, "state", "queued", `{"to":"ada"}`} {
		if !strings.Contains(table, want) {
			t.Errorf("table has no %q:\n%s", want, table)
		}
	}
	r := b.run("", "task", "get", "emails", "cv3k1s1hhc2s73b0o3ng")
	if r.code != 1 || r.out != "" || !strings.Contains(r.err, "not found") {
		t.Errorf("unknown task: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	// Metadata is shown apart from the payload, which is as enqueued.
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	mid, err := b.client.Enqueue(context.Background(), "emails", []byte("hi"), &worqr.EnqueueOpts{Meta: map[string]string{"traceparent": tp}})
	if err != nil {
		t.Fatal(err)
	}
	got = taskJSON{}
	if out := b.ok("", "task", "get", "emails", mid, "-o", "json"); json.Unmarshal([]byte(out), &got) != nil ||
		deref(got.Payload) != "hi" || got.Meta["traceparent"] != tp {
		t.Errorf("task with metadata: %s", out)
	}
	table = b.ok("", "task", "get", mid)
	if !strings.Contains(table, `traceparent="`+tp+`"`) || !regexp.MustCompile(`(?m)^payload +hi$`).MatchString(table) {
		t.Errorf("task with metadata, table:\n%s", table)
	}
}

func TestTaskRetryDeleteAndCancel(t *testing.T) {
	b := setup(t)
	dead := b.bury("emails", "e1", "e2")
	b.ok("", "task", "retry", "emails", dead[0])
	b.ok("", "task", "delete", "emails", dead[1])
	if qi := b.queue("emails"); qi.Dead != 0 || qi.Waiting != 1 {
		t.Errorf("%d dead, %d waiting; want 0 and 1", qi.Dead, qi.Waiting)
	}
	if r := b.run("", "task", "retry", "emails", dead[1]); r.code != 1 || !strings.Contains(r.err, "not in the dead set") ||
		!strings.Contains(r.err, "it is unknown") {
		t.Errorf("retry of a deleted task: exit %d, stderr %q", r.code, r.err)
	}
	// Run again (as after an error whose reply was lost): it says where
	// the task is now.
	if r := b.run("", "task", "retry", "emails", dead[0]); r.code != 1 || !strings.Contains(r.err, "(it is queued)") {
		t.Errorf("a second retry: exit %d, stderr %q", r.code, r.err)
	}
	if out := b.ok("", "task", "cancel", "emails", dead[0]); out != "removed "+dead[0]+"\n" {
		t.Errorf("cancel: %q", out)
	}
	if r := b.run("", "task", "cancel", "emails", dead[0]); r.code != 1 || !strings.Contains(r.err, "nothing to cancel") ||
		!strings.Contains(r.err, ": it is unknown") {
		t.Errorf("a second cancel: exit %d, stderr %q", r.code, r.err)
	}
	if b.queue("emails").Waiting != 0 {
		t.Error("the cancelled task still waits")
	}
}

func TestTaskLsByState(t *testing.T) {
	b := setup(t)
	ids := b.enqueue("emails", "a", "b", "c")
	out := b.ok("", "task", "ls", "emails", "--state", "queued", "--limit", "2", "--offset", "1", "-o", "json")
	var got struct {
		Total int
		Tasks []taskJSON
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Total != 3 || len(got.Tasks) != 2 || got.Tasks[0].ID != ids[1] || got.Tasks[1].ID != ids[2] {
		t.Errorf("got %+v", got)
	}
	r := b.run("", "task", "ls", "emails", "--state", "sleeping")
	if r.code != 2 || !strings.Contains(r.err, `--state "sleeping"`) {
		t.Errorf("bad state: exit %d, stderr %q", r.code, r.err)
	}
}

func TestUsageErrorsExitTwoAndNameTheProblem(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"queue", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stats", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"stats", "-o", "yaml"}, `-o/--output "yaml": want table or json`},
		{[]string{"stats", "--history", "--minutes", "0"}, "--minutes 0: must be between 1 and 120"},
		{[]string{"stats", "--minutes", "5"}, "--minutes: only with --history"},
		{[]string{"stats", "--history", "--watch"}, "--history: not with --watch"},
		{[]string{"queue", "history"}, "missing argument <queue>"},
		{[]string{"task", "cancel", "emails"}, "missing argument <id>"},
		{[]string{"queue", "pause", "bad name"}, `<queue> "bad name"`},
		{[]string{"stats", "--redis-url", "http://x"}, "--redis-url"},
	} {
		r := b.run("", c.args...)
		if r.code != 2 || !strings.Contains(r.err, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.err, c.want)
		}
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

func TestWorkersLs(t *testing.T) {
	b := setup(t)
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"emails": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return nil })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	out := b.ok("", "workers", "ls", "-o", "json")
	var ws []workerJSON
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !ws[0].Alive || !reflect.DeepEqual(ws[0].Queues, []string{"emails"}) || ws[0].PID != os.Getpid() {
		t.Errorf("got %+v", ws)
	}
	if table := b.ok("", "workers", "ls"); !strings.Contains(table, "WORKER") || !strings.Contains(table, "emails") {
		t.Errorf("table:\n%s", table)
	}
}

func TestFlowRunsGetAndTree(t *testing.T) {
	b := setup(t)
	flow := &worqr.Flow{Name: "signup", Stages: []worqr.Stage{
		{Name: "fanout", Queue: worqr.QueueConfig{Concurrency: 2},
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(context.Context, *worqr.Task) error { return nil })}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"seen": "yes"},
					Children: []worqr.ChildSpec{{Queue: "mail", Payload: []byte("1")}, {Queue: "mail", Payload: []byte("2")}}}, nil
			})},
		{Name: "finish", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })},
	}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	id, err := b.client.StartRun(context.Background(), flow, map[string]string{"user": "42"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(b.t, patience, "the run to end", func() bool {
		r, err := b.in.Run(context.Background(), flow.Name, id)
		return err == nil && r.Status == worqr.RunDone
	})
	var runs []runJSON
	if err := json.Unmarshal([]byte(b.ok("", "flow", "runs", "signup", "--status", "done", "-o", "json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != id || runs[0].State["seen"] != "yes" || len(runs[0].Children) != 2 {
		t.Errorf("runs: %+v", runs)
	}
	if out := b.ok("", "flow", "runs", "signup", "--status", "failed", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("failed runs: %s", out)
	}
	get := b.ok("", "flow", "get", "signup", id)
	for _, want := range []string{"status", "done", "user", "42", "children: 2"} {
		if !strings.Contains(get, want) {
			t.Errorf("flow get has no %q:\n%s", want, get)
		}
	}
	tree := b.ok("", "flow", "tree", "signup", id)
	if !strings.HasPrefix(tree, "run "+id+"  flow signup  done") || !strings.Contains(tree, "queue mail") ||
		strings.Count(tree, "  done\n") != 4 {
		t.Errorf("tree:\n%s", tree)
	}
	if r := b.run("", "flow", "get", "signup", "cv3k1s1hhc2s73b0o3ng"); r.code != 1 || !strings.Contains(r.err, "not found") {
		t.Errorf("unknown run: exit %d, stderr %q", r.code, r.err)
	}
}

// events follows what processes publish: here a client enqueueing every
// 100 ms until two events were printed (the first enqueues may come before
// the command subscribed).
func TestEventsFollowsLiveEvents(t *testing.T) {
	b := setup(t)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				_, _ = b.client.Enqueue(context.Background(), "live", []byte("x"), nil)
			}
		}
	}()
	lines := b.runLines(2, "events", "--queue", "live", "-o", "json")
	for _, l := range lines {
		var e struct {
			Kind, Queue, Task string
			At                *string
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Kind != "enqueued" || e.Queue != "live" || e.Task == "" || e.At == nil {
			t.Errorf("event line %q: %v %+v; want an enqueued event of queue live with its task and time", l, err, e)
		}
	}
}

// TestLoadKilledAndResumedEnqueuesEveryLineOnce kills a load with SIGKILL
// mid-way and resumes it: every line of the file is a task exactly once.
func TestLoadKilledAndResumedEnqueuesEveryLineOnce(t *testing.T) {
	b := setup(t)
	const lines = 200_000
	var input bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&input, "{\"n\":%d}\n", i)
	}
	file := filepath.Join(t.TempDir(), "payloads.jsonl")
	if err := os.WriteFile(file, input.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Small steps, one at a time, so that the kill lands mid-way.
	cmd := exec.Command(binPath, "load", file, "--queue", "ld", "--format", "jsonl", "--chunk", "100", "--window", "1", "--every", "1ms")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "enqueued ") && !strings.Contains(sc.Text(), "enqueued 0 ") {
			break
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	first := b.queue("ld").Waiting
	if first == 0 || first >= lines {
		t.Fatalf("%d tasks after the kill: the kill did not land mid-load", first)
	}

	r := b.run("", "load", file, "--queue", "ld", "--format", "jsonl")
	if r.code != exitUsage || !strings.Contains(r.err, "--resume continues it") {
		t.Errorf("started again without --resume: exit %d, stderr %q; want 2 and a hint at --resume", r.code, r.err)
	}
	out := b.ok("", "load", file, "--queue", "ld", "--format", "jsonl", "--resume", "-o", "json")
	var res struct{ Lines, Enqueued, Resumed int64 }
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("load -o json: %v\n%s", err, out)
	}
	if res.Lines != lines || res.Enqueued+res.Resumed != lines || res.Resumed < int64(first) {
		t.Errorf("resumed load reported %+v; want %d lines, enqueued+resumed = lines, resumed >= %d", res, lines, first)
	}
	qi := b.queue("ld")
	if qi.Waiting != lines {
		t.Fatalf("%d tasks waiting after the resume; want %d", qi.Waiting, lines)
	}
	c := b.pool.Get()
	defer c.Close()
	ids, err := redis.Strings(c.Do("LRANGE", b.ns+":{ld}:q:ld", 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	// Loaded tasks wait packed: the payload is field <last 3 characters of
	// the id> of the hash lb:<the rest>, shared by about 2,000 lines.
	for _, id := range ids {
		_ = c.Send("HGET", b.ns+":{ld}:lb:"+id[:len(id)-3], id[len(id)-3:])
	}
	_ = c.Flush()
	seen := make(map[string]bool, lines)
	for range ids {
		p, err := redis.String(c.Receive())
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("payload %s enqueued twice", p)
		}
		seen[p] = true
	}
	for i := 1; i <= lines; i++ {
		if !seen[fmt.Sprintf("{\"n\":%d}", i)] {
			t.Fatalf("line %d was never enqueued", i)
		}
	}
}

func TestLoadUsageErrors(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "-", "--queue", "q"}, "--name is required when reading stdin"},
		{[]string{"load", "-", "--name", "n"}, "--queue is required"},
		{[]string{"load", "-", "--queue", "q", "--name", "n", "--format", "csv"}, `--format "csv": want raw or jsonl`},
		{[]string{"load", "-", "--queue", "q", "--name", "bad name"}, "--name"},
		{[]string{"load", "-", "--queue", "q", "--name", "n", "--chunk", "0"}, "--chunk 0: want 1 to 2000"},
		{[]string{"load", "/no/such/file", "--queue", "q"}, "no such file"},
	} {
		r := b.run("a\n", c.args...)
		if r.code != exitUsage || !strings.Contains(r.err, c.want) {
			t.Errorf("worqr %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), r.code, r.err, c.want)
		}
	}
	out := b.ok("x\n\ny\n", "load", "-", "--queue", "q", "--name", "n")
	if !strings.Contains(out, "enqueued 2 tasks into q from 3 lines (1 blank, 0 loaded before)") {
		t.Errorf("load from stdin said %q", out)
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

func TestPeriodicLsPauseResumeRm(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	s, err := worqr.NewScheduler(b.pool, &worqr.SchedulerConfig{Config: worqr.Config{Namespace: b.ns}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []worqr.Schedule{
		{Name: "nightly", Queue: "reports", Cron: "0 0 2 * * *", TimeZone: "Europe/Paris", Missed: worqr.MissedRunOnce},
		{Name: "beat", Queue: "pings", Every: time.Minute, StartWithin: 30 * time.Second, Opts: &worqr.EnqueueOpts{
			Type: "ping", Priority: 2, Timeout: -1, Meta: map[string]string{"team": "ops a"}}},
	} {
		if err := s.Register(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	out := b.ok("", "periodic", "ls")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "beat") ||
		!strings.Contains(lines[1], "every 1m0s") || !strings.Contains(lines[2], "0 0 2 * * * (Europe/Paris)") ||
		!strings.Contains(lines[2], "run_once") || !strings.Contains(lines[0], "TASK OPTIONS") ||
		!strings.HasSuffix(lines[1], `type=ping priority=2 timeout=none meta.team="ops a" start_within=30s`) ||
		!strings.HasSuffix(lines[2], " -") {
		t.Fatalf("periodic ls:\n%s", out)
	}
	if out := b.ok("", "periodic", "pause", "nightly"); out != "paused nightly\n" {
		t.Errorf("pause printed %q", out)
	}
	var got []scheduleJSON
	if err := json.Unmarshal([]byte(b.ok("", "periodic", "ls", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Name != "nightly" || !got[1].Paused || got[1].Cron != "0 0 2 * * *" ||
		got[1].TimeZone != "Europe/Paris" || got[0].EveryMs != 60000 || got[0].Paused || got[0].Next == nil ||
		got[0].Type != "ping" || got[0].Priority != 2 || got[0].TimeoutMS != -1 || got[0].Meta["team"] != "ops a" ||
		got[0].StartWithinMS != 30000 || got[1].Type != "" || got[1].Meta != nil {
		t.Fatalf("periodic ls -o json: %+v", got)
	}
	b.ok("", "periodic", "resume", "nightly")
	if info, err := b.in.Schedule(ctx, "nightly"); err != nil || info.Paused {
		t.Fatalf("after resume: %+v %v", info, err)
	}
	if out := b.ok("", "periodic", "rm", "nightly"); out != "removed nightly\n" {
		t.Errorf("rm printed %q", out)
	}
	if _, err := b.in.Schedule(ctx, "nightly"); !errors.Is(err, worqr.ErrScheduleNotFound) {
		t.Fatalf("after rm: %v", err)
	}
	r := b.run("", "periodic", "pause", "nightly")
	if r.code != 1 || !strings.Contains(r.err, `schedule "nightly" not found`) {
		t.Errorf("pause of a removed schedule: exit %d, stderr %q", r.code, r.err)
	}
	r = b.run("", "periodic", "rm", "a{b}")
	if r.code != 2 || !strings.Contains(r.err, "<name>") {
		t.Errorf("rm of a bad name: exit %d, stderr %q", r.code, r.err)
	}
	if r := b.run("", "periodic", "--help"); r.code != 0 || !strings.Contains(r.out, "worqr periodic pause nightly-report") {
		t.Errorf("periodic --help: exit %d\n%s", r.code, r.out)
	}
}

func TestTaskLsExpired(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id, err := b.client.Enqueue(ctx, "reports", []byte("late"), &worqr.EnqueueOpts{
		Deadline: time.Now().Add(-time.Minute), Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"reports": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return errors.New("must not run") })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	redistest.WaitFor(b.t, patience, "the task expired", func() bool {
		info, err := b.in.Task(ctx, "reports", id)
		return err == nil && info.State == worqr.StateExpired
	})
	out := b.ok("", "task", "ls", "reports", "--state", "expired")
	if !strings.Contains(out, id) {
		t.Fatalf("task ls --state expired:\n%s", out)
	}
	var got taskJSON
	if err := json.Unmarshal([]byte(b.ok("", "task", "get", "reports", id, "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.State != "expired" || got.Deadline == nil || got.FinishedAt == nil {
		t.Fatalf("task get -o json: %+v", got)
	}
}

// A bad line stops a load after the lines before it; fixed in place, the
// file is resumed by the command the error prints, or by the same command
// with --resume (its default name does not change with the fix), and every
// line ends up enqueued once. A --resume under a name that never started
// enqueues nothing.
func TestLoadFixedAndResumedEnqueuesEveryLineOnce(t *testing.T) {
	b := setup(t)
	var input bytes.Buffer
	for i := 1; i <= 1000; i++ {
		if i == 701 {
			input.WriteString("{oops\n")
			continue
		}
		fmt.Fprintf(&input, "{\"n\":%d}\n", i)
	}
	file := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(file, input.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld2", "--format", "jsonl")
	if r.code != exitUsage || !strings.Contains(r.err, "line 701") || !strings.Contains(r.err, "--resume") {
		t.Fatalf("bad line: exit %d, stderr %q; want 2, the line and how to resume", r.code, r.err)
	}
	if n := b.queue("ld2").Waiting; n != 700 {
		t.Fatalf("%d tasks after the bad line, want the 700 before it", n)
	}
	fixed := bytes.Replace(input.Bytes(), []byte("{oops\n"), []byte("{\"n\":701}\n"), 1)
	if err := os.WriteFile(file, fixed, 0o600); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "load", file, "--queue", "ld2", "--format", "jsonl", "--resume", "--name", "never-started")
	if r.code != exitUsage || !strings.Contains(r.err, "no load to resume") {
		t.Errorf("resume of a load that never started: exit %d, stderr %q; want 2 and no load to resume", r.code, r.err)
	}
	out := b.ok("", "load", file, "--queue", "ld2", "--format", "jsonl", "--resume")
	if !strings.Contains(out, "enqueued 300 tasks into ld2 from 1000 lines (0 blank, 700 loaded before)") {
		t.Errorf("resume after the fix said %q", out)
	}
	if n := b.queue("ld2").Waiting; n != 1000 {
		t.Fatalf("%d tasks after the resume, want 1000", n)
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

func TestEventsRefusesAnUnknownKind(t *testing.T) {
	b := setup(t)
	r := b.run("", "events", "--kind", "dead,given back")
	if r.code != exitUsage || !strings.Contains(r.err, `--kind "given back": not an event kind`) || !strings.Contains(r.err, "given_back") {
		t.Errorf("events --kind with a bad kind: exit %d, stderr %q; want 2 and the kinds", r.code, r.err)
	}
}

// task wait and flow wait block until the end and say it in the exit code:
// 0 for done, 1 for anything else, 1 on --timeout.
func TestTaskAndFlowWait(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	flow := &worqr.Flow{Name: "f", Stages: []worqr.Stage{{Name: "only", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			if r.State["fail"] != "" {
				return nil, worqr.SkipRetry(errors.New("no such user"))
			}
			return &worqr.StageResult{}, nil
		})}}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns, EventInterval: 20 * time.Millisecond},
		Flows:  []*worqr.Flow{flow},
		Queues: map[string]worqr.QueueConfig{"jobs": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(
			func(_ context.Context, t *worqr.Task) error {
				<-release
				if string(t.Payload) == "bad" {
					return worqr.SkipRetry(errors.New("bad payload"))
				}
				return nil
			})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	defer close(release)
	good := b.enqueue("jobs", "good")[0]
	bad := b.enqueue("jobs", "bad")[0]
	if r := b.run("", "task", "wait", "jobs", good, "--timeout", "100ms"); r.code != exitTimedOut || !strings.Contains(r.err, "timed out after 100ms: task "+good+" is active") {
		t.Errorf("wait with a timeout: exit %d, stderr %q; want %d and the task's state", r.code, r.err, exitTimedOut)
	}
	go func() { release <- struct{}{}; release <- struct{}{} }()
	if out := b.ok("", "task", "wait", "jobs", good); out != "done "+good+"\n" {
		t.Errorf("wait for a done task printed %q", out)
	}
	if r := b.run("", "task", "wait", "jobs", bad); r.code != exitDead || r.out != "dead "+bad+"\n" || !strings.Contains(r.err, "ended dead: bad payload") {
		t.Errorf("wait for a dead task: exit %d, stdout %q, stderr %q; want %d, its state and its error", r.code, r.out, r.err, exitDead)
	}
	if r := b.run("", "task", "wait", "jobs", "nosuchtask"); r.code != 1 || !strings.Contains(r.err, "not found") {
		t.Errorf("wait for an unknown task: exit %d, stderr %q", r.code, r.err)
	}
	ok, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := b.client.StartRun(context.Background(), flow, map[string]string{"fail": "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "flow", "wait", "f", ok); out != "done "+ok+"\n" {
		t.Errorf("flow wait for a done run printed %q", out)
	}
	if r := b.run("", "flow", "wait", "f", failed); r.code != exitDead || r.out != "failed "+failed+"\n" || !strings.Contains(r.err, "no such user") {
		t.Errorf("flow wait for a failed run: exit %d, stdout %q, stderr %q; want %d", r.code, r.out, r.err, exitDead)
	}
}

// A load stopped before it enqueued anything (a bad first line) has no
// checkpoint: the error says to run it again, not to resume it.
func TestLoadBadFirstLineSaysRunAgain(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "first.jsonl")
	if err := os.WriteFile(file, []byte("{oops\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld3", "--format", "jsonl")
	if r.code != exitUsage || !strings.Contains(r.err, "line 1") || !strings.Contains(r.err, "not with --resume") {
		t.Fatalf("bad first line: exit %d, stderr %q; want 2 and to run it again without --resume", r.code, r.err)
	}
	if err := os.WriteFile(file, []byte("{\"n\":1}\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "load", file, "--queue", "ld3", "--format", "jsonl"); !strings.Contains(out, "enqueued 2 tasks") {
		t.Errorf("the load run again said %q", out)
	}
}

// A load whose only chunk before a bad line held blank lines has a
// checkpoint all the same: the error says to resume it (before, it said to
// run it again, which is refused while the checkpoint exists).
func TestLoadBlankLinesThenABadLineSaysResume(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "blank.jsonl")
	if err := os.WriteFile(file, []byte("\n\n{oops\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld4", "--format", "jsonl", "--name", "blank")
	if r.code != exitUsage || !strings.Contains(r.err, "line 3") || !strings.Contains(r.err, "--resume") || strings.Contains(r.err, "not with --resume") {
		t.Fatalf("blank lines, then a bad line: exit %d, stderr %q; want 2 and to resume it", r.code, r.err)
	}
	if err := os.WriteFile(file, []byte("\n\n{\"n\":1}\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "load", file, "--queue", "ld4", "--format", "jsonl", "--name", "blank", "--resume"); !strings.Contains(out, "enqueued 2 tasks") {
		t.Errorf("the load resumed said %q", out)
	}
}

// An ordered queue: `queue ls` counts its keys, `queue keys` shows each
// key's head and what waits behind it, and `queue purge` deletes every
// waiting task, those behind the keys' heads included.
func TestQueueKeysAndPurgeOfAnOrderedQueue(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for key, n := range map[string]int{"order-42": 5, "order-43": 2} {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte(fmt.Sprintf("%s/%d", key, i))
		}
		if _, err := b.client.EnqueueBatch(ctx, "orders", ps, &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	if out := b.ok("", "queue", "ls"); !regexp.MustCompile(`(?m)^orders\s+-\s+2\s+5\s+0\s+0\s+0\s+0\s+2\s`).MatchString(out) {
		t.Errorf("queue ls: 2 heads waiting, 5 tasks behind them and 2 keys wanted:\n%s", out)
	}
	if out := b.ok("", "queue", "inspect", "orders"); !regexp.MustCompile(`(?m)^behind\s+5$`).MatchString(out) {
		t.Errorf("queue inspect: 5 tasks behind the heads wanted:\n%s", out)
	}
	var keys []struct {
		Key       string `json:"key"`
		HeadState string `json:"head_state"`
		Behind    int    `json:"behind"`
	}
	if err := json.Unmarshal([]byte(b.ok("", "queue", "keys", "orders", "-o", "json")), &keys); err != nil {
		t.Fatal(err)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	if len(keys) != 2 || keys[0].Key != "order-42" || keys[0].Behind != 4 || keys[1].Behind != 1 || keys[0].HeadState != "queued" {
		t.Errorf("queue keys: %+v, want order-42 with 4 behind and order-43 with 1, heads queued", keys)
	}
	r := b.run("", "queue", "purge", "orders", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "deleted 7 waiting and scheduled tasks of orders") {
		t.Errorf("purge: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	if out := b.ok("", "queue", "keys", "orders"); !strings.Contains(out, "no keys with tasks in queue orders") {
		t.Errorf("queue keys after the purge: %q", out)
	}
}

// A fair queue: `queue keys` shows each key's tasks waiting and running,
// whether it is blocked, and its limits (its own, or the queue's).
func TestQueueKeysOfAFairQueue(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetKeyPolicy(ctx, "tenants", worqr.KeyPolicy{Fair: true}); err != nil {
		t.Fatal(err)
	}
	acme := worqr.KeyLimits{Weight: 2, Limits: worqr.Limits{Concurrency: 5, Rate: 600, Period: time.Minute}}
	if err := b.client.SetKeyLimits(ctx, "tenants", "acme", acme); err != nil {
		t.Fatal(err)
	}
	for key, n := range map[string]int{"acme": 3, "beta": 1} {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte("p")
		}
		if _, err := b.client.EnqueueBatch(ctx, "tenants", ps, &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	if out := b.ok("", "queue", "ls"); !regexp.MustCompile(`(?m)^tenants\s+-\s+4\s`).MatchString(out) {
		t.Errorf("queue ls: the keys' 4 tasks waiting wanted:\n%s", out)
	}
	out := b.ok("", "queue", "keys", "tenants")
	for _, re := range []string{`(?m)^KEY\s+WAITING\s+RUNNING\s+BLOCKED\s+WEIGHT\s+CONCURRENCY\s+RATE$`,
		`(?m)^acme\s+3\s+0\s+no\s+2\s+5\s+600/1m0s$`, `(?m)^beta\s+1\s+0\s+no\s+1\s+-\s+-$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("queue keys: %s wanted:\n%s", re, out)
		}
	}
	var keys []struct {
		Key         string `json:"key"`
		Behind      int    `json:"behind"`
		Concurrency int    `json:"concurrency"`
		Rate        int    `json:"rate"`
		PeriodMs    int64  `json:"period_ms"`
	}
	if err := json.Unmarshal([]byte(b.ok("", "queue", "keys", "tenants", "-o", "json")), &keys); err != nil {
		t.Fatal(err)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	if len(keys) != 2 || keys[0].Behind != 3 || keys[0].Concurrency != 5 || keys[0].Rate != 600 || keys[0].PeriodMs != 60_000 {
		t.Errorf("queue keys -o json: %+v", keys)
	}
}

// --unique-key needs --unique-ttl (the key's longest hold): refused, naming
// the flag, before anything is sent; with it, a second enqueue of the key
// is refused while the first task waits.
func TestEnqueueUniqueKeyNeedsTTL(t *testing.T) {
	b := setup(t)
	if r := b.run("", "enqueue", "emails", "x", "--unique-key", "k1"); r.code != 2 || !strings.Contains(r.err, "--unique-key needs --unique-ttl") {
		t.Errorf("--unique-key alone: exit %d, stderr %q; want 2 naming --unique-ttl", r.code, r.err)
	}
	b.ok("", "enqueue", "emails", "x", "--unique-key", "k1", "--unique-ttl", "1m")
	if r := b.run("", "enqueue", "emails", "y", "--unique-key", "k1", "--unique-ttl", "1m"); r.code == 0 {
		t.Errorf("a second enqueue of key k1 while the first waits: exit 0, stdout %q", r.out)
	}
	if qi := b.queue("emails"); qi.Waiting != 1 {
		t.Errorf("emails holds %d waiting, want 1", qi.Waiting)
	}
}

// `flow cancel` cancels a run that waits (no worker serves the flow) with
// only the flow's name; a second cancel (as after a lost reply: it says
// the run is cancelled), or one of an unknown run, exits 1.
func TestFlowCancel(t *testing.T) {
	b := setup(t)
	flow := &worqr.Flow{Name: "signup", Retention: time.Minute, Stages: []worqr.Stage{{Name: "only", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })}}}
	id, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "flow", "cancel", "signup", id); strings.TrimSpace(out) != "cancelled "+id {
		t.Errorf("flow cancel: %q", out)
	}
	if r, err := b.in.Run(context.Background(), flow.Name, id); err != nil || r.Status != worqr.RunCancelled {
		t.Fatalf("run after flow cancel: %+v, %v", r, err)
	}
	for run, want := range map[string]string{id: "is not running: it is cancelled", "nosuchrun": "is not running (it ended and expired, or never existed)"} {
		if r := b.run("", "flow", "cancel", "signup", run); r.code != 1 || !strings.Contains(r.err, want) {
			t.Errorf("flow cancel of %s: exit %d, stderr %q; want 1, %q", run, r.code, r.err, want)
		}
	}
}

// `flow retry` runs a failed run again from the stage it failed in, with
// only the flow's name; a second retry (as after a lost reply: it says the
// run is running), or one of an unknown run, exits 1.
func TestFlowRetry(t *testing.T) {
	b := setup(t)
	var fail atomic.Bool
	fail.Store(true)
	flow := &worqr.Flow{Name: "signup", Retention: time.Minute, Stages: []worqr.Stage{{Name: "only",
		Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
			if fail.Load() {
				return nil, errors.New("down")
			}
			return &worqr.StageResult{}, nil
		})}}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	id, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	status := func() worqr.RunStatus {
		r, err := b.in.Run(context.Background(), flow.Name, id)
		if err != nil {
			return ""
		}
		return r.Status
	}
	redistest.WaitFor(b.t, patience, "the run to fail", func() bool { return status() == worqr.RunFailed })
	if r := b.run("", "flow", "retry", "signup", "nosuchrun"); r.code != 1 || !strings.Contains(r.err, "is not failed (it ended and expired, or never existed)") {
		t.Errorf("flow retry of an unknown run: exit %d, stderr %q", r.code, r.err)
	}
	fail.Store(false)
	if out := b.ok("", "flow", "retry", "signup", id); strings.TrimSpace(out) != "retried "+id {
		t.Errorf("flow retry: %q", out)
	}
	redistest.WaitFor(b.t, patience, "the retried run to end done", func() bool { return status() == worqr.RunDone })
	if r := b.run("", "flow", "retry", "signup", id); r.code != 1 || !strings.Contains(r.err, "is not failed: it is done") {
		t.Errorf("flow retry of a done run: exit %d, stderr %q", r.code, r.err)
	}
}

// `task run-now` moves a delayed task to its queue at once; a second one
// (the task waits now) exits 1.
func TestTaskRunNow(t *testing.T) {
	b := setup(t)
	id, err := b.client.Enqueue(context.Background(), "emails", []byte("x"), &worqr.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if qi := b.queue("emails"); qi.Scheduled != 1 || qi.Waiting != 0 {
		t.Fatalf("before: %+v, want 1 scheduled", qi)
	}
	if out := b.ok("", "task", "run-now", "emails", id); strings.TrimSpace(out) != "moved "+id {
		t.Errorf("task run-now: %q", out)
	}
	if qi := b.queue("emails"); qi.Scheduled != 0 || qi.Waiting != 1 {
		t.Errorf("after: %+v, want 1 waiting", qi)
	}
	if r := b.run("", "task", "run-now", "emails", id); r.code != 1 || !strings.Contains(r.err, "is not scheduled (it is queued)") {
		t.Errorf("a second run-now: exit %d, stderr %q", r.code, r.err)
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

// A load that Redis refuses (an error reply: OOM under maxmemory, here a
// waiting list of the wrong type) says how far it got and how to go on;
// it printed Redis's error alone.
func TestLoadRefusedByRedisSaysHowToGoOn(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "refused.txt")
	if err := os.WriteFile(file, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := b.pool.Get()
	defer c.Close()
	waiting := b.ns + ":{ld5}:q:ld5"
	if _, err := c.Do("SET", waiting, "not a list"); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld5")
	if r.code == 0 || !strings.Contains(r.err, "WRONGTYPE") || !strings.Contains(r.err, "0 tasks enqueued now") || !strings.Contains(r.err, "run the same command again") {
		t.Fatalf("refused load: exit %d, stderr %q; want Redis's error, how far it got and how to go on", r.code, r.err)
	}
	if _, err := c.Do("DEL", waiting); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "load", file, "--queue", "ld5"); !strings.Contains(out, "enqueued 2 tasks") {
		t.Errorf("the load run again said %q", out)
	}
}

// events stops, and says why, when its output cannot be written (a full
// disk, a closed socket): it followed on, printing nothing, forever.
func TestEventsStopsWhenItsOutputFails(t *testing.T) {
	b := setup(t)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	defer full.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "events")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if _, err := b.client.Enqueue(ctx, "live", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		b.client.Flush()
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "no space left on device") {
				t.Fatalf("events with a failing output: %v, stderr %q; want exit 1 naming the write error", err, errb.String())
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if ctx.Err() != nil {
			t.Fatalf("events still runs 30 s after its output failed (stderr %q)", errb.String())
		}
	}
}

// `flow signal` delivers a signal to a run that waits for it and keeps
// one for a run that does not yet; `flow wake` wakes a sleeping run; `flow
// get` shows what a run waits for and when it wakes.
func TestFlowSignalAndWake(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	next := func(string) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })
	}
	flow := &worqr.Flow{Name: "order", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "charge", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if r.State["mode"] == "sleep" {
					return &worqr.StageResult{Sleep: time.Hour}, nil
				}
				return &worqr.StageResult{Await: "paid", Sleep: time.Hour}, nil
			})},
		{Name: "ship", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: next("ship")},
	}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck
	run := func(mode string) string {
		id, err := b.client.StartRun(ctx, flow, map[string]string{"mode": mode}, nil)
		if err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(b.t, patience, "run "+id+" to sleep", func() bool {
			r, err := b.in.Run(ctx, flow.Name, id)
			return err == nil && r.Stage == "ship" && r.TaskState == "scheduled"
		})
		return id
	}
	status := func(id string) worqr.RunStatus {
		r, err := b.in.Run(ctx, flow.Name, id)
		if err != nil {
			return ""
		}
		return r.Status
	}
	awaits := run("await")
	if out := b.ok("", "flow", "get", "order", awaits); !strings.Contains(out, "awaiting     paid") || strings.Contains(out, "wake_at      -") {
		t.Errorf("flow get of a run awaiting paid:\n%s", out)
	}
	if out := b.ok("", "flow", "signal", "order", awaits, "paid", `{"amount":12}`, "--id", "evt_1"); strings.TrimSpace(out) != "delivered "+awaits {
		t.Errorf("flow signal: %q", out)
	}
	redistest.WaitFor(b.t, patience, "the signalled run to end", func() bool { return status(awaits) == worqr.RunDone })
	if r, err := b.in.Run(ctx, flow.Name, awaits); err != nil || r.State["paid"] != `{"amount":12}` {
		t.Errorf("the signalled run: %+v, %v; want paid in its state", r, err)
	}
	if r := b.run("", "flow", "signal", "order", awaits, "paid", "again", "--id", "evt_1"); r.code != 1 || !strings.Contains(r.err, "is not running") {
		t.Errorf("a signal of an ended run: exit %d, stderr %q", r.code, r.err)
	}
	sleeps := run("sleep")
	if out := b.ok("", "flow", "signal", "order", sleeps, "later"); strings.TrimSpace(out) != "kept "+sleeps {
		t.Errorf("flow signal of a run that does not await it: %q", out)
	}
	if out := b.ok("", "flow", "wake", "order", sleeps); strings.TrimSpace(out) != "woke "+sleeps {
		t.Errorf("flow wake: %q", out)
	}
	redistest.WaitFor(b.t, patience, "the woken run to end", func() bool { return status(sleeps) == worqr.RunDone })
	if r := b.run("", "flow", "wake", "order", sleeps); r.code != 1 || !strings.Contains(r.err, "does not sleep: it is done") {
		t.Errorf("flow wake of an ended run: exit %d, stderr %q", r.code, r.err)
	}
}

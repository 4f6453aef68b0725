package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

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

// `queue rm` refuses a queue that holds tasks (saying what and how to
// force it), asks before it removes, and with --force deletes the tasks
// with progress lines, then forgets the queue: `queue ls` no longer lists
// it, and a second removal says it is not known.
func TestQueueRm(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1")
	b.enqueue("emails", "w1", "w2", "w3")
	r := b.run("", "queue", "rm", "emails", "--yes")
	if r.code != 1 || !strings.Contains(r.err, "3 waiting, 1 dead") || !strings.Contains(r.err, "only when forced") ||
		!strings.Contains(r.err, "--force") {
		t.Errorf("rm of a queue with tasks: exit %d, stderr %q; want 1 and the rule", r.code, r.err)
	}
	r = b.run("y\n", "queue", "rm", "emails", "--force")
	if r.code != 2 || !strings.Contains(r.err, "without --yes: stdin is not a terminal") {
		t.Errorf("rm --force without --yes: exit %d, stderr %q; want 2", r.code, r.err)
	}
	if qi := b.queue("emails"); qi.Waiting != 3 || qi.Dead != 1 {
		t.Fatalf("a refused rm changed the queue: %+v", qi)
	}
	r = b.run("", "queue", "rm", "emails", "--force", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "removed queue emails (deleted 4 tasks)") {
		t.Fatalf("rm --force --yes: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	if !strings.Contains(r.err, "deleted 4 of about 4") {
		t.Errorf("rm --force printed no progress line on stderr: %q", r.err)
	}
	if out := b.ok("", "queue", "ls"); strings.Contains(out, "emails") {
		t.Errorf("queue ls after rm:\n%s", out)
	}
	if r := b.run("", "queue", "rm", "emails", "--yes"); r.code != 1 || !strings.Contains(r.err, `queue "emails" is not known`) {
		t.Errorf("rm again: exit %d, stderr %q", r.code, r.err)
	}
	if r := b.run("", "queue", "rm", "flow/stage", "--yes"); r.code != 2 || !strings.Contains(r.err, "flow's queue") {
		t.Errorf("rm of a flow queue: exit %d, stderr %q", r.code, r.err)
	}
}

// An empty queue goes without --force; one a live worker serves is
// refused, --force or not, naming the worker.
func TestQueueRmEmptyAndServed(t *testing.T) {
	b := setup(t)
	b.enqueue("typo", "x")
	if _, err := b.in.DeleteAllWaiting(context.Background(), "typo", nil); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "queue", "rm", "typo", "--yes"); !strings.Contains(out, "removed queue typo\n") {
		t.Errorf("rm of an empty queue: %q", out)
	}
	if out := b.ok("", "queue", "ls"); strings.Contains(out, "typo") {
		t.Errorf("queue ls after rm:\n%s", out)
	}

	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"busy": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return nil })}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	r := b.run("", "queue", "rm", "busy", "--force", "--yes")
	if r.code != 1 || !strings.Contains(r.err, "served by 1 live worker") || !strings.Contains(r.err, w.ID()) {
		t.Errorf("rm of a served queue: exit %d, stderr %q", r.code, r.err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/worqr/worqr-go/worqr"
)

const taskHead = `Usage: worqr-example task [flags] <queue> <task_id>

Prints what Redis holds about one task of a plain queue, one "key value" line
per field, always in this order:
  id <task_id>
  queue <queue>
  state queued|active|scheduled|dead|done|cancelled
  failures <n>                 (failed attempts so far)
  crashes <n>                  (runs lost because their worker died)
  last_error <text>            (of the last failed attempt)
  dead_reason <text>           (why a dead task died)
  died_at <time>
  died_on <worker_id>
  worker <worker_id>           (the taking's worker, while active)
  pid <pid>                    (the taking, while active)
  cancel_requested true|false
  enqueued_at <time>           (read from the id: second precision)
  due_at <time>                (when a scheduled task becomes available)
  finished_at <time>           (when a done or cancelled task ended)
  payload_bytes <n>
  result_bytes <n>
An empty value is "-"; a text that holds spaces or other special characters
is Go-quoted ("..."). Times are RFC3339Nano in UTC. With -o json it prints one
JSON object with the same keys instead (empty texts are "", unset times null).

When no task has that id in that queue (it never existed, or it ended and its
record is gone: done and cancelled tasks stay only for the queue's retention)
it prints nothing on stdout and exits 1. The tasks of the flow's stages and
children are kept under the flow's keys and are not found here.
`

func runTask(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("task")
	var c common
	c.register(fs, io.getenv, true)
	var format string
	fs.StringVar(&format, "o", "text", "output format: text (key value lines) or json")
	fs.StringVar(&format, "output", "text", "same as -o")
	pos, err := parseWithArgs(fs, args, io.out, taskHead, "\nEnvironment:\n"+envHelp(true, false))
	if err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	if format != "text" && format != "json" {
		return usagef("-o %q: want text or json", format)
	}
	if len(pos) != 2 {
		return usagef("want two arguments, <queue> <task_id>; got %d", len(pos))
	}
	queue, id := pos[0], pos[1]
	if err := worqr.CheckQueueName(queue); err != nil {
		return usagef("queue name %s", ruleOf(err))
	}
	if id == "" || strings.ContainsFunc(id, unicode.IsSpace) {
		return usagef("task id %q must be one word", id)
	}
	cn, err := c.connect(ctx, io)
	if err != nil {
		return err
	}
	defer cn.close()
	info, err := cn.in.Task(ctx, queue, id)
	if errors.Is(err, worqr.ErrTaskNotFound) {
		return fmt.Errorf("task %s not found in queue %q: it never existed, or it ended and its record is gone", id, queue)
	}
	if err != nil {
		return err
	}
	if format == "json" {
		b, err := json.Marshal(newTaskJSON(info))
		if err != nil {
			return err
		}
		_, err = io.out.Write(append(b, '\n'))
		return err
	}
	out := &lineWriter{w: io.out}
	for _, kv := range taskLines(info) {
		if err := out.line(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// taskLines returns the key value pairs the task subcommand prints, in order.
func taskLines(t *worqr.TaskInfo) [][2]string {
	return [][2]string{
		{"id", textValue(t.ID)},
		{"queue", textValue(t.Queue)},
		{"state", textValue(string(t.State))},
		{"failures", strconv.Itoa(t.Failures)},
		{"crashes", strconv.Itoa(t.Crashes)},
		{"last_error", textValue(t.LastError)},
		{"dead_reason", textValue(t.DeadReason)},
		{"died_at", timeValue(t.DiedAt)},
		{"died_on", textValue(t.DiedOn)},
		{"worker", textValue(t.WorkerID)},
		{"pid", textValue(t.PID)},
		{"cancel_requested", strconv.FormatBool(t.CancelRequested)},
		{"enqueued_at", timeValue(t.EnqueuedAt)},
		{"due_at", timeValue(t.DueAt)},
		{"finished_at", timeValue(t.FinishedAt)},
		{"payload_bytes", strconv.Itoa(len(t.Payload))},
		{"result_bytes", strconv.Itoa(len(t.Result))},
	}
}

// textValue renders a text as one word-safe value: "-" when empty, Go-quoted
// when it holds anything but printable non-space characters (an error's
// text, a panic's stack) or could be read as empty or quoted.
func textValue(s string) string {
	switch {
	case s == "":
		return "-"
	case s == "-" || strings.HasPrefix(s, `"`) ||
		strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return strconv.Quote(s)
	}
	return s
}

// timeValue renders a time as RFC3339Nano in UTC, or "-" when unset.
func timeValue(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// taskJSON is the task subcommand's -o json object: the keys of taskLines.
type taskJSON struct {
	ID              string     `json:"id"`
	Queue           string     `json:"queue"`
	State           string     `json:"state"`
	Failures        int        `json:"failures"`
	Crashes         int        `json:"crashes"`
	LastError       string     `json:"last_error"`
	DeadReason      string     `json:"dead_reason"`
	DiedAt          *time.Time `json:"died_at"`
	DiedOn          string     `json:"died_on"`
	Worker          string     `json:"worker"`
	PID             string     `json:"pid"`
	CancelRequested bool       `json:"cancel_requested"`
	EnqueuedAt      *time.Time `json:"enqueued_at"`
	DueAt           *time.Time `json:"due_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	PayloadBytes    int        `json:"payload_bytes"`
	ResultBytes     int        `json:"result_bytes"`
}

func newTaskJSON(t *worqr.TaskInfo) taskJSON {
	tm := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return taskJSON{
		ID: t.ID, Queue: t.Queue, State: string(t.State),
		Failures: t.Failures, Crashes: t.Crashes,
		LastError: t.LastError, DeadReason: t.DeadReason,
		DiedAt: tm(t.DiedAt), DiedOn: t.DiedOn,
		Worker: t.WorkerID, PID: t.PID, CancelRequested: t.CancelRequested,
		EnqueuedAt: tm(t.EnqueuedAt), DueAt: tm(t.DueAt), FinishedAt: tm(t.FinishedAt),
		PayloadBytes: len(t.Payload), ResultBytes: len(t.Result),
	}
}

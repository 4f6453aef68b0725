package worqrtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/worqr/worqr-go/worqr"
)

// Match says what an enqueued task must look like. Every field left at its
// zero value matches any task; Match{} matches every task.
type Match struct {
	// Payload, when not nil, is the payload: a []byte or a string is
	// compared byte for byte; any other value (a struct, a map,
	// json.RawMessage) is encoded as JSON and compared with the payload
	// read as JSON, so that field order and spacing do not matter. The
	// payload of a task enqueued with a type (worqr.EnqueueOpts.Type) is
	// the one given, without the type.
	Payload any
	// Type is the task's type (worqr.EnqueueOpts.Type).
	Type string
	// Key is the task's EnqueueOpts.Key (an ordered queue's key).
	Key string
	// UniqueKey is the task's EnqueueOpts.UniqueKey (or its UniqueKeys
	// entry).
	UniqueKey string
	// Priority is the task's EnqueueOpts.Priority; 0 matches any.
	Priority int
	// Delay matches a task scheduled to be due this long after Env.Now:
	// to the millisecond on the in-process Redis while the clock has not
	// been moved since the enqueue; up to a second earlier on a real
	// Redis, whose clock moves.
	Delay time.Duration
	// At matches a task scheduled to be due at this time, to the
	// millisecond (EnqueueOpts.At, or a retry's due time).
	At time.Time
	// Deadline is the task's EnqueueOpts.Deadline, to the millisecond.
	Deadline time.Time
	// MaxAttempts is the task's EnqueueOpts.MaxAttempts; 0 matches any.
	MaxAttempts int
	// Meta entries must all be in the task's metadata (EnqueueOpts.Meta).
	Meta map[string]string
}

// String shows the fields of m that are set.
func (m Match) String() string {
	var parts []string
	add := func(name string, v any) { parts = append(parts, fmt.Sprintf("%s: %v", name, v)) }
	if m.Payload != nil {
		switch p := m.Payload.(type) {
		case []byte:
			add("Payload", showBytes(p))
		case string:
			add("Payload", showBytes([]byte(p)))
		default:
			b, err := json.Marshal(p)
			if err != nil {
				add("Payload", fmt.Sprintf("%#v (%v)", p, err))
			} else {
				add("Payload", string(b))
			}
		}
	}
	if m.Type != "" {
		add("Type", strconv.Quote(m.Type))
	}
	if m.Key != "" {
		add("Key", strconv.Quote(m.Key))
	}
	if m.UniqueKey != "" {
		add("UniqueKey", strconv.Quote(m.UniqueKey))
	}
	if m.Priority != 0 {
		add("Priority", m.Priority)
	}
	if m.Delay != 0 {
		add("Delay", m.Delay)
	}
	if !m.At.IsZero() {
		add("At", m.At.UTC().Format(time.RFC3339Nano))
	}
	if !m.Deadline.IsZero() {
		add("Deadline", m.Deadline.UTC().Format(time.RFC3339Nano))
	}
	if m.MaxAttempts != 0 {
		add("MaxAttempts", m.MaxAttempts)
	}
	if len(m.Meta) > 0 {
		add("Meta", m.Meta)
	}
	if len(parts) == 0 {
		return "{any task}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// RequireEnqueued fails t unless queue ("<queue>", or "<flow>/<queue>")
// holds a task waiting or scheduled (enqueued and not taken yet) that
// matches m, and returns the first such task (in queue order, then the
// scheduled ones by due time). The failure says what was expected and
// lists what the queue holds.
func (e *Env) RequireEnqueued(t testing.TB, queue string, m Match) *worqr.TaskInfo {
	t.Helper()
	ts, now := e.read(t, "RequireEnqueued", queue)
	for _, tk := range ts {
		if tk.mismatch(m, now, e.slack()) == "" {
			return tk.info
		}
	}
	t.Fatalf("worqrtest: RequireEnqueued: no task of queue %q matches %s; %s", queue, m, e.listing(queue, ts, now, []Match{m}))
	return nil
}

// RequireNotEnqueued fails t if queue holds a task waiting or scheduled
// that matches m, and lists those. RequireNotEnqueued(t, queue, Match{})
// requires the queue to hold none.
func (e *Env) RequireNotEnqueued(t testing.TB, queue string, m Match) {
	t.Helper()
	ts, now := e.read(t, "RequireNotEnqueued", queue)
	var found []*task
	for _, tk := range ts {
		if tk.mismatch(m, now, e.slack()) == "" {
			found = append(found, tk)
		}
	}
	if len(found) > 0 {
		t.Fatalf("worqrtest: RequireNotEnqueued: want no task of queue %q matching %s, found %d:\n%s",
			queue, m, len(found), describeTasks(found, now, nil, 0))
	}
}

// RequireEnqueuedMany fails t unless queue holds exactly as many tasks
// waiting or scheduled as ms, each matching its own Match (in any order),
// and returns them in the order of ms. The failure names the matches left
// without a task and the tasks left over.
func (e *Env) RequireEnqueuedMany(t testing.TB, queue string, ms ...Match) []*worqr.TaskInfo {
	t.Helper()
	ts, now := e.read(t, "RequireEnqueuedMany", queue)
	pair := assign(len(ms), len(ts), func(i, j int) bool { return ts[j].mismatch(ms[i], now, e.slack()) == "" })
	var missing []string
	used := make([]bool, len(ts))
	for i, j := range pair {
		if j < 0 {
			missing = append(missing, fmt.Sprintf("  [%d] %s", i, ms[i]))
		} else {
			used[j] = true
		}
	}
	var extra []*task
	for j, u := range used {
		if !u {
			extra = append(extra, ts[j])
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		out := make([]*worqr.TaskInfo, len(ms))
		for i, j := range pair {
			out[i] = ts[j].info
		}
		return out
	}
	var b strings.Builder
	fmt.Fprintf(&b, "worqrtest: RequireEnqueuedMany: want %s of queue %q, one for each match, and no other", tasks(len(ms)), queue)
	if len(missing) > 0 {
		fmt.Fprintf(&b, "\nno task for:\n%s", strings.Join(missing, "\n"))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, "\nnot expected:\n%s", describeTasks(extra, now, nil, 0))
	}
	fmt.Fprintf(&b, "\n%s", e.listing(queue, ts, now, nil))
	t.Fatal(b.String())
	return nil
}

// slack is how much earlier than Now plus Match.Delay a task may be due
// and match: none on the in-process clock, which stands still; a second
// on a real Redis, whose clock moved since the enqueue.
func (e *Env) slack() time.Duration {
	if e.mr != nil {
		return 0
	}
	return time.Second
}

// maxRead is the most tasks of a state the assertions read; a queue that
// holds more fails them.
const maxRead = 10_000

// task is an enqueued task with what TaskInfo does not show.
type task struct {
	info        *worqr.TaskInfo
	typ         string // of a typed payload
	payload     []byte // the payload, without its type
	priority    int
	unique      string
	maxAttempts int
}

// read returns the tasks queue holds waiting (in queue order, each key's
// tasks behind its head after it) and scheduled (by due time), and Redis's
// time.
func (e *Env) read(t testing.TB, op, queue string) ([]*task, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultBound)
	defer cancel()
	now := e.Now()
	fail := func(err error) {
		t.Helper()
		t.Fatalf("worqrtest: %s: reading queue %q: %v", op, queue, err)
	}
	list := func(st worqr.TaskState) []*worqr.TaskInfo {
		t.Helper()
		ts, total, err := e.inspector.Tasks(ctx, queue, st, 0, maxRead)
		if err != nil {
			fail(err)
		}
		if total > maxRead {
			t.Fatalf("worqrtest: %s: queue %q holds %d %s tasks, more than the %d the assertions read", op, queue, total, st, maxRead)
		}
		return ts
	}
	behind, err := e.behind(ctx, queue)
	if err != nil {
		fail(err)
	}
	var infos []*worqr.TaskInfo
	for _, ti := range list(worqr.StateQueued) {
		infos = append(infos, ti)
		if ti.Key != "" {
			infos = append(infos, behind[ti.Key]...)
			delete(behind, ti.Key)
		}
	}
	// The keys whose head is not waiting (running, scheduled, dead).
	keys := make([]string, 0, len(behind))
	for k := range behind {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		infos = append(infos, behind[k]...)
	}
	infos = append(infos, list(worqr.StateScheduled)...)
	out, err := e.extras(ctx, queue, infos)
	if err != nil {
		fail(err)
	}
	return out, now
}

// behind returns the tasks waiting behind the head of each key of an
// ordered queue, in the order they will run.
func (e *Env) behind(ctx context.Context, queue string) (map[string][]*worqr.TaskInfo, error) {
	out := map[string][]*worqr.TaskInfo{}
	n := 0
	for cursor := uint64(0); ; {
		keys, next, _, err := e.inspector.Keys(ctx, queue, cursor, 1000)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if _, seen := out[k.Key]; seen || k.Behind == 0 {
				continue
			}
			ids, err := e.inspector.TasksBehind(ctx, queue, k.Key, 0, maxRead)
			if err != nil {
				return nil, err
			}
			if n += len(ids); n > maxRead {
				return nil, fmt.Errorf("more than %d tasks wait behind the heads of its keys, more than the assertions read", maxRead)
			}
			ts := make([]*worqr.TaskInfo, 0, len(ids))
			for _, id := range ids {
				ti, err := e.inspector.Task(ctx, queue, id)
				if err != nil {
					return nil, fmt.Errorf("task %s: %w", id, err)
				}
				ts = append(ts, ti)
			}
			out[k.Key] = ts
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// extras is what a match compares of each of infos: its payload without
// a type's envelope and its type, and its own options.
func (e *Env) extras(_ context.Context, _ string, infos []*worqr.TaskInfo) ([]*task, error) {
	out := make([]*task, len(infos))
	for i, ti := range infos {
		out[i] = &task{info: ti, typ: ti.Type, payload: ti.HandlerPayload(), priority: ti.Priority, unique: ti.UniqueKey, maxAttempts: ti.MaxAttempts}
	}
	return out, nil
}

// mismatch says why tk does not match m ("" when it does), at Redis time
// now: a Delay matches a due time up to slack before now + Delay.
func (tk *task) mismatch(m Match, now time.Time, slack time.Duration) string {
	ti := tk.info
	if m.Type != "" && tk.typ != m.Type {
		return fmt.Sprintf("type %q, want %q", tk.typ, m.Type)
	}
	if m.Payload != nil {
		if why := payloadMismatch(tk.payload, m.Payload); why != "" {
			return why
		}
	}
	if m.Key != "" && ti.Key != m.Key {
		return fmt.Sprintf("key %q, want %q", ti.Key, m.Key)
	}
	if m.UniqueKey != "" && tk.unique != m.UniqueKey {
		return fmt.Sprintf("unique key %q, want %q", tk.unique, m.UniqueKey)
	}
	if m.Priority != 0 && tk.priority != m.Priority {
		return fmt.Sprintf("priority %d, want %d", tk.priority, m.Priority)
	}
	if m.Delay != 0 || !m.At.IsZero() {
		if ti.State != worqr.StateScheduled {
			return fmt.Sprintf("%s, want scheduled", ti.State)
		}
		due := ti.DueAt
		if want := now.Add(m.Delay); m.Delay != 0 && (due.After(want) || due.Before(want.Add(-slack))) {
			return fmt.Sprintf("due in %s, want %s", due.Sub(now), m.Delay)
		}
		if !m.At.IsZero() && !due.Equal(m.At.Truncate(time.Millisecond)) {
			return fmt.Sprintf("due at %s, want %s", stamp(due), stamp(m.At))
		}
	}
	if !m.Deadline.IsZero() && !ti.Deadline.Equal(m.Deadline.Truncate(time.Millisecond)) {
		return fmt.Sprintf("deadline %s, want %s", stamp(ti.Deadline), stamp(m.Deadline))
	}
	if m.MaxAttempts != 0 && tk.maxAttempts != m.MaxAttempts {
		return fmt.Sprintf("max attempts %d, want %d", tk.maxAttempts, m.MaxAttempts)
	}
	for k, v := range m.Meta {
		if got, ok := ti.Meta[k]; !ok {
			return fmt.Sprintf("no meta %s, want %q", k, v)
		} else if got != v {
			return fmt.Sprintf("meta %s %q, want %q", k, got, v)
		}
	}
	return ""
}

// payloadMismatch compares a payload with Match.Payload.
func payloadMismatch(got []byte, want any) string {
	switch w := want.(type) {
	case []byte:
		if !bytes.Equal(got, w) {
			return "payload differs"
		}
		return ""
	case string:
		if string(got) != w {
			return "payload differs"
		}
		return ""
	}
	wb, err := json.Marshal(want)
	if err != nil {
		return fmt.Sprintf("Match.Payload cannot be encoded as JSON: %v", err)
	}
	var gv, wv any
	if err := json.Unmarshal(got, &gv); err != nil {
		return "payload is not JSON"
	}
	if err := json.Unmarshal(wb, &wv); err != nil {
		return fmt.Sprintf("Match.Payload cannot be read back as JSON: %v", err)
	}
	if !reflect.DeepEqual(gv, wv) {
		return "payload differs as JSON"
	}
	return ""
}

// listing describes what queue holds, each task with why it does not
// match the first of ms (when given).
func (e *Env) listing(queue string, ts []*task, now time.Time, ms []Match) string {
	if len(ts) > 0 {
		return fmt.Sprintf("queue %q holds %s waiting or scheduled:\n%s", queue, tasks(len(ts)), describeTasks(ts, now, ms, e.slack()))
	}
	s := fmt.Sprintf("queue %q holds no task waiting or scheduled", queue)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if known, err := e.inspector.Known(ctx, queue); err == nil && !known {
		s += fmt.Sprintf(" (nothing was ever enqueued on it in the Env's namespace %q: does the code under test use Env.Client, or Env.Config?)", e.ns)
	}
	return s
}

// describeTasks lists tasks, one a line, with why each does not match ms[0].
func describeTasks(ts []*task, now time.Time, ms []Match, slack time.Duration) string {
	const most = 50
	var b strings.Builder
	for i, tk := range ts {
		if i == most {
			fmt.Fprintf(&b, "  ... and %d more\n", len(ts)-most)
			break
		}
		b.WriteString("  ")
		b.WriteString(tk.describe(now))
		if len(ms) > 0 {
			if why := tk.mismatch(ms[0], now, slack); why != "" {
				fmt.Fprintf(&b, "\n      (%s)", why)
			}
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// describe shows a task on one line.
func (tk *task) describe(now time.Time) string {
	ti := tk.info
	parts := []string{ti.ID, string(ti.State)}
	if ti.State == worqr.StateScheduled {
		parts = append(parts, fmt.Sprintf("due in %s (%s)", ti.DueAt.Sub(now), stamp(ti.DueAt)))
	}
	if tk.typ != "" {
		parts = append(parts, "type "+strconv.Quote(tk.typ))
	}
	if ti.Key != "" {
		parts = append(parts, "key "+strconv.Quote(ti.Key))
	}
	if tk.unique != "" {
		parts = append(parts, "unique key "+strconv.Quote(tk.unique))
	}
	if tk.priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", tk.priority))
	}
	if tk.maxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", tk.maxAttempts))
	}
	if !ti.Deadline.IsZero() {
		parts = append(parts, "deadline "+stamp(ti.Deadline))
	}
	if len(ti.Meta) > 0 {
		parts = append(parts, fmt.Sprintf("meta %v", ti.Meta))
	}
	parts = append(parts, "payload "+showBytes(tk.payload))
	return strings.Join(parts, "  ")
}

// showBytes shows a payload: as it is when it is short printable text,
// quoted otherwise, cut at 200 bytes.
func showBytes(p []byte) string {
	const most = 200
	cut := ""
	if len(p) > most {
		p, cut = p[:most], fmt.Sprintf("... (%d bytes)", len(p))
	}
	s := string(p)
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' }) {
		s = strconv.Quote(s)
	}
	return s + cut
}

// tasks says "1 task", "2 tasks".
func tasks(n int) string {
	if n == 1 {
		return "1 task"
	}
	return strconv.Itoa(n) + " tasks"
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// assign pairs each of n matches with its own of k tasks (ok says which
// pairs fit), as many as possible (augmenting paths: a match may take a
// task from an earlier one that has another to go to). pair[i] is the
// task of match i, -1 when none is left for it.
func assign(n, k int, ok func(i, j int) bool) []int {
	pair := make([]int, n)
	owner := make([]int, k)
	for j := range owner {
		owner[j] = -1
	}
	var try func(i int, seen []bool) bool
	try = func(i int, seen []bool) bool {
		for j := 0; j < k; j++ {
			if seen[j] || !ok(i, j) {
				continue
			}
			seen[j] = true
			if owner[j] < 0 || try(owner[j], seen) {
				owner[j] = i
				pair[i] = j
				return true
			}
		}
		return false
	}
	for i := range pair {
		pair[i] = -1
		try(i, make([]bool, k))
	}
	return pair
}

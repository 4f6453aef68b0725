package dash

import (
	"context"
	"net/url"
	"strings"

	"github.com/worqr/worqr-go/worqr"
)

// filterScan bounds how many tasks of one state a filter reads (newest
// first for the dead, next to run first for the waiting): a filter, and an
// action on its matches, covers this many at most; the page says so.
const filterScan = 5000

// scanPage is how many tasks one read of a filter's scan returns.
const scanPage = 500

// maxSelected bounds the ids one action on a selection takes.
const maxSelected = 1000

// filter narrows a state's task list. The zero filter matches every task.
type filter struct {
	Type  string // the task type (EnqueueOpts.Type), exactly
	Key   string // the key of an ordered queue's task, exactly
	Group string // an error group as the dead page shows it (worqr.ErrorShape), exactly
	Error string // words of the error (case-insensitive)
	Text  string // words of the payload (case-insensitive)
}

// filterOf reads a filter from a query or a form: type, key, group,
// error, q.
func filterOf(v url.Values) filter {
	return filter{Type: strings.TrimSpace(v.Get("type")), Key: strings.TrimSpace(v.Get("key")),
		Group: v.Get("group"), Error: strings.TrimSpace(v.Get("error")), Text: strings.TrimSpace(v.Get("q"))}
}

// On reports whether the filter narrows anything.
func (f filter) On() bool { return f != filter{} }

// Query is the filter as query parameters ("&type=...&q=..."), to follow
// a link's own parameters.
func (f filter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"type": f.Type, "key": f.Key, "group": f.Group, "error": f.Error, "q": f.Text} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "&" + v.Encode()
}

// match reports whether t passes the filter.
func (f filter) match(t *worqr.TaskInfo) bool {
	inner := t.HandlerPayload()
	if f.Type != "" && t.Type != f.Type {
		return false
	}
	if f.Key != "" && t.Key != f.Key {
		return false
	}
	if f.Group != "" && worqr.ErrorShape(errorText(t)) != f.Group {
		return false
	}
	if f.Error != "" && !containsFold(errorText(t), f.Error) {
		return false
	}
	// The payload's own text, or as the page shows it (indented JSON, a
	// binary one in hex).
	if f.Text != "" && !containsFold(string(inner), f.Text) && !containsFold(printable(inner), f.Text) {
		return false
	}
	return true
}

// errorText is what a task's error group is made from: its last error, or
// for a task that died without one, why it died.
func errorText(t *worqr.TaskInfo) string {
	if t.LastError != "" {
		return t.LastError
	}
	return t.DeadReason
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// scan is the outcome of a filter over one state of a queue.
type scan struct {
	Matches int               // how many of the tasks read match
	Page    []*worqr.TaskInfo // the matches from skip, at most keep
	Scanned int               // how many tasks were read
	Total   int               // how many the state holds
	Capped  bool              // the state holds more than filterScan: the rest was not read
}

// scanTasks reads up to filterScan tasks of queue in state, in pages, and
// keeps the matches of f from the skip-th, at most keep of them (keep < 0:
// all).
func (d *Dashboard) scanTasks(ctx context.Context, queue string, state worqr.TaskState, f filter, skip, keep int) (*scan, error) {
	var out scan
	for out.Scanned < filterScan {
		ts, total, err := d.in.Tasks(ctx, queue, state, out.Scanned, min(scanPage, filterScan-out.Scanned))
		if err != nil {
			return nil, err
		}
		out.Total = total
		for _, t := range ts {
			if !f.match(t) {
				continue
			}
			if out.Matches >= skip && (keep < 0 || len(out.Page) < keep) {
				out.Page = append(out.Page, t)
			}
			out.Matches++
		}
		out.Scanned += len(ts)
		if len(ts) == 0 || out.Scanned >= total {
			break
		}
	}
	out.Capped = out.Scanned < out.Total
	return &out, nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// The built-in demo flow, after Guild.xyz's access flow (seeds/guild-queues):
//
//	access-check -> update-membership -> manage-reward -> notify
//	                                         |  fan-out: one child per platform
//	                                         +-> discord, telegram
//
// Runs are indexed by userId. Every handler sleeps its work time (returning
// early when its context ends) and returns a few state fields; the children
// record a result; notify sums up how the children ended.
const (
	accessFlowName        = "guild-access"
	stageAccessCheck      = "access-check"
	stageUpdateMembership = "update-membership"
	stageManageReward     = "manage-reward"
	stageNotify           = "notify"
	childDiscord          = "discord"
	childTelegram         = "telegram"
	accessIndexBy         = "userId"
)

// accessPlatforms are the child queues manage-reward fans out into.
var accessPlatforms = []string{childDiscord, childTelegram}

// accessFlowOpts tune the built-in flow's handlers.
type accessFlowOpts struct {
	concurrency int
	// queue carries the retry settings of every stage and child queue
	// (MaxAttempts, MaxCrashes, Backoff, Retention); its Handler and
	// Concurrency are ignored.
	queue worqr.QueueConfig
	// failFirst makes each stage and child fail its first attempts.
	failFirst     int
	workTime      time.Duration // each stage handler sleeps this long
	childWorkTime time.Duration // each child handler sleeps this long
	// onStage and onChild, when set, are called as a handler starts.
	onStage func(r *worqr.Run)
	onChild func(t *worqr.Task)
}

// newAccessFlow returns the built-in flow with handlers tuned by o.
func newAccessFlow(o accessFlowOpts) *worqr.Flow {
	qc := o.queue
	qc.Handler, qc.Concurrency = nil, o.concurrency
	stage := func(name string, result func(r *worqr.Run) *worqr.StageResult) worqr.Stage {
		return worqr.Stage{
			Name:  name,
			Queue: qc,
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if o.onStage != nil {
					o.onStage(r)
				}
				if r.Attempt <= o.failFirst {
					return nil, fmt.Errorf("failing attempt %d of stage %s on purpose (--fail-first)", r.Attempt, r.Stage)
				}
				if err := sleepCtx(ctx, o.workTime); err != nil {
					return nil, err
				}
				return result(r), nil
			}),
		}
	}
	child := qc
	child.Handler = worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		if o.onChild != nil {
			o.onChild(t)
		}
		if t.Attempt <= o.failFirst {
			return fmt.Errorf("failing attempt %d of child %s on purpose (--fail-first)", t.Attempt, t.ID)
		}
		if err := sleepCtx(ctx, o.childWorkTime); err != nil {
			return err
		}
		t.SetResult([]byte(fmt.Sprintf("granted %s role to user %s", t.Queue, t.Payload)))
		return nil
	})

	access := stage(stageAccessCheck, func(r *worqr.Run) *worqr.StageResult {
		return &worqr.StageResult{Fields: map[string]string{"access": "granted"}}
	})
	membership := stage(stageUpdateMembership, func(r *worqr.Run) *worqr.StageResult {
		return &worqr.StageResult{Fields: map[string]string{"membership": "member"}}
	})
	reward := stage(stageManageReward, func(r *worqr.Run) *worqr.StageResult {
		res := &worqr.StageResult{Fields: map[string]string{"rewards": strings.Join(accessPlatforms, ",")}}
		for _, p := range accessPlatforms {
			res.Children = append(res.Children, worqr.ChildSpec{Queue: p, Payload: []byte(r.State[accessIndexBy])})
		}
		return res
	})
	reward.Children = map[string]worqr.QueueConfig{}
	for _, p := range accessPlatforms {
		reward.Children[p] = child
	}
	notify := stage(stageNotify, func(r *worqr.Run) *worqr.StageResult {
		return &worqr.StageResult{Fields: map[string]string{"notified": childSummary(r.Children)}}
	})
	return &worqr.Flow{
		Name:    accessFlowName,
		Stages:  []worqr.Stage{access, membership, reward, notify},
		IndexBy: []string{accessIndexBy},
	}
}

// childSummary renders how children ended, as "discord=done telegram=done".
func childSummary(kids []worqr.ChildResult) string {
	parts := make([]string, 0, len(kids))
	for _, c := range kids {
		parts = append(parts, c.Queue+"="+c.Status)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// flagSet says whether flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// sleepCtx waits d or until ctx ends (returning ctx.Err()).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lines of the worker subcommand for flow events (lines.go has the others).
const (
	lineForwarded = "forwarded"
	lineFannedOut = "fanned_out"
	lineStarted   = "started"
)

// flowEventLine returns the line of a flow event, or nil.
func flowEventLine(e worqr.Event) []string {
	switch e.Kind {
	case worqr.EventForwarded:
		return []string{lineForwarded, inFlow(e.Queue), e.TaskID}
	case worqr.EventFannedOut:
		return []string{lineFannedOut, inFlow(e.Queue), e.TaskID}
	}
	return nil
}

// stageTookLine is the line a stage handler prints when it starts: a stage
// handler sees neither its taking's pid nor the crashes, so those words are
// "-".
func stageTookLine(r *worqr.Run) []string {
	return []string{lineTook, r.Stage, r.ID, "-", strconv.Itoa(r.Attempt), "-"}
}

const flowHead = `Usage: worqr-example flow [flags]

Starts --count runs of the built-in flow guild-access (served by
'worqr-example worker --flow'): access-check -> update-membership ->
manage-reward, which fans out one child per platform into the child queues
discord and telegram -> notify. Runs are indexed by userId. Prints one line
per run on stdout:
  started <run_id>
`

func runFlow(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("flow")
	var c common
	c.register(fs, io.getenv, true)
	count := fs.Int("count", 1, "number of runs (at least 1)")
	userID := fs.String("user-id", "", "the userId of every run (default: user-1, user-2, ...)")
	if err := parse(fs, args, io.out, flowHead, "\nEnvironment:\n"+envHelp(true, false)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	if *count < 1 {
		return usagef("--count (%d) must be at least 1", *count)
	}
	cn, err := c.connect(ctx, io)
	if err != nil {
		return err
	}
	defer cn.close()
	client := cn.client
	flow := newAccessFlow(accessFlowOpts{concurrency: 1})
	out := &lineWriter{w: io.out}
	for i := 1; i <= *count; i++ {
		user := *userID
		if user == "" {
			user = "user-" + strconv.Itoa(i)
		}
		id, err := client.StartRun(ctx, flow, map[string]string{accessIndexBy: user}, nil)
		if id != "" {
			if err := out.line(lineStarted, id); err != nil {
				return err
			}
		}
		if err != nil {
			return notReplicated(err)
		}
	}
	return nil
}

// The demo's flow part: a few runs through the in-process workers.
const (
	demoFlowRuns      = 3
	demoFlowWorkTime  = 50 * time.Millisecond
	demoFlowChildWork = 100 * time.Millisecond
)

// demoFlowOpts are the handlers' settings of the demo's in-process workers.
func demoFlowOpts() accessFlowOpts {
	return accessFlowOpts{concurrency: 2, workTime: demoFlowWorkTime, childWorkTime: demoFlowChildWork}
}

// isAccessFlowQueue says whether queue (as events name it,
// "<flow>/<queue>") is one of the built-in flow's queues.
func isAccessFlowQueue(queue string) bool {
	q, ok := strings.CutPrefix(queue, accessFlowName+"/")
	if !ok {
		return false
	}
	switch q {
	case stageAccessCheck, stageUpdateMembership, stageManageReward, stageNotify, childDiscord, childTelegram:
		return true
	}
	return false
}

// flowEvent counts the flow's stage and child endings for the demo's checks.
func (d *demo) flowEvent(e worqr.Event) {
	switch e.Kind {
	case worqr.EventDone, worqr.EventForwarded, worqr.EventFannedOut:
		d.update(func() {
			if d.flowEnds == nil {
				d.flowEnds = map[string]int{}
			}
			d.flowEnds[inFlow(e.Queue)+" "+e.TaskID]++
		})
	case worqr.EventLost, worqr.EventCancelled, worqr.EventDead, worqr.EventRetry, worqr.EventRecovered:
		d.update(func() {
			d.anomalies = append(d.anomalies, fmt.Sprintf("flow %s %s %s", e.Kind, e.Queue, e.TaskID))
		})
	}
}

// runFlows starts a few runs of the built-in flow, waits until they end,
// prints each run's state and checks it.
func (d *demo) runFlows(ctx context.Context, client *worqr.Client, in *worqr.Inspector) error {
	flow := newAccessFlow(demoFlowOpts())
	d.say("flow %s: %s -> %s -> %s (fans out to %s) -> %s, indexed by %s",
		flow.Name, stageAccessCheck, stageUpdateMembership, stageManageReward,
		strings.Join(accessPlatforms, " and "), stageNotify, accessIndexBy)
	ids := make([]string, demoFlowRuns)
	users := make([]string, demoFlowRuns)
	started := time.Now()
	for i := range ids {
		users[i] = "user-" + strconv.Itoa(i+1)
		id, err := client.StartRun(ctx, flow, map[string]string{accessIndexBy: users[i]}, nil)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	d.say("started %d runs on the in-process workers: %s", len(ids), strings.Join(ids, " "))
	infos := make([]*worqr.RunInfo, len(ids))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i, id := range ids {
		for {
			info, err := in.Run(ctx, flow.Name, id)
			if err != nil {
				return fmt.Errorf("run %s: %w", id, err)
			}
			if info.Status != worqr.RunRunning {
				infos[i] = info
				break
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("gave up waiting for run %s (stage %s, %s)", id, info.Stage, info.TaskState)
			}
		}
	}
	d.say("%d runs ended after %.1fs", len(ids), time.Since(started).Seconds())
	// A run is done in Redis when its last stage's end is applied; the
	// worker reports that end (OnEvent) a moment later. Give the reports a
	// second to arrive before counting them.
	reported := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, info := range infos {
			for _, s := range flow.Stages {
				if d.flowEnds[s.Name+" "+info.ID] == 0 {
					return false
				}
			}
			for _, c := range info.Children {
				if d.flowEnds[c.Queue+" "+c.ID] == 0 {
					return false
				}
			}
		}
		return true
	}
	for wait := time.Now().Add(time.Second); !reported() && time.Now().Before(wait); {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for i, info := range infos {
		d.say("run %s (userId %s): %s at stage %s", info.ID, users[i], info.Status, info.Stage)
		d.say("  state: %s", renderState(info.State))
		for _, c := range info.Children {
			d.say("  child %s on %s: %s %q%s", c.ID, c.Queue, c.Status, c.Result, errSuffix(c.Err))
		}
		if info.Status != worqr.RunDone {
			bad("run %s ended %s (%s), want done", info.ID, info.Status, info.LastError)
		}
		want := map[string]string{
			accessIndexBy: users[i], "access": "granted", "membership": "member",
			"rewards": strings.Join(accessPlatforms, ","), "notified": "discord=done telegram=done",
		}
		for k, v := range want {
			if info.State[k] != v {
				bad("run %s: state %s = %q, want %q", info.ID, k, info.State[k], v)
			}
		}
		if len(info.Children) != len(accessPlatforms) {
			bad("run %s has %d children, want %d", info.ID, len(info.Children), len(accessPlatforms))
		}
		for _, c := range info.Children {
			if wantRes := fmt.Sprintf("granted %s role to user %s", c.Queue, users[i]); c.Status != "done" || string(c.Result) != wantRes {
				bad("run %s: child %s on %s: %s %q, want done %q", info.ID, c.ID, c.Queue, c.Status, c.Result, wantRes)
			}
		}
		found, err := in.FindRuns(ctx, flow, accessIndexBy, users[i])
		if err != nil {
			return err
		}
		if len(found) != 1 || found[0].ID != info.ID {
			bad("FindRuns(%s=%s) found %d runs, want run %s", accessIndexBy, users[i], len(found), info.ID)
		}
		d.mu.Lock()
		for _, s := range flow.Stages {
			if n := d.flowEnds[s.Name+" "+info.ID]; n != 1 {
				bad("run %s: stage %s ended %d times, want 1", info.ID, s.Name, n)
			}
		}
		for _, c := range info.Children {
			if n := d.flowEnds[c.Queue+" "+c.ID]; n != 1 {
				bad("run %s: child %s ended %d times, want 1", info.ID, c.ID, n)
			}
		}
		d.mu.Unlock()
	}
	if len(problems) > 0 {
		return fmt.Errorf("flow checks failed:\n  %s", strings.Join(problems, "\n  "))
	}
	d.say("flow %s: %d runs done, each stage and child ended once, each run found by %s", flow.Name, len(ids), accessIndexBy)
	return nil
}

// renderState prints state fields sorted by name.
func renderState(m map[string]string) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		v := m[k]
		if strings.ContainsAny(v, " \"") || v == "" {
			v = strconv.Quote(v)
		}
		parts[i] = k + "=" + v
	}
	return strings.Join(parts, " ")
}

func errSuffix(err string) string {
	if err == "" {
		return ""
	}
	return " (" + err + ")"
}

package worqr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Flow is a pipeline of stages (queues) that share one state per run. A
// finished stage forwards the run to the next stage's queue in the same
// atomic step that records the finish; a stage may fan out child tasks, and
// the run moves on exactly once, when the last child ends.
//
// All keys of a flow share the flow's hash tag. Declare the same Flow value in
// the processes that start runs (Client) and those that serve them (Worker).
type Flow struct {
	// Name is the flow's name and hash tag; queue-name rules apply.
	Name string
	// Stages run in order. At least one; names unique within the flow and
	// different from the flow's name and from every child queue's.
	Stages []Stage
	// IndexBy lists state fields runs can be found by (Inspector.FindRuns).
	// Queue-name rules apply to these names.
	IndexBy []string
	// Retention is how long an ended run (done, failed, cancelled) and its
	// index entries are kept. Default 24h.
	Retention time.Duration
}

// Stage is one step of a flow.
type Stage struct {
	// Name is the stage's queue name within the flow.
	Name string
	// Handler runs the stage for each run.
	Handler StageHandler
	// Queue sets the stage queue's concurrency (required) and its retry,
	// timeout and dead-set settings. Its Handler must be nil.
	Queue QueueConfig
	// Children declares the child queues this stage may fan out into, with
	// the handler (a plain Handler: the child's payload is its Task.Payload,
	// its result is what it passes to Task.SetResult) and settings of each.
	Children map[string]QueueConfig
	// ContinueOnChildFailure makes a child that ends dead (attempts used up)
	// count as ended, with its error recorded in the run, instead of failing
	// the run and cancelling the other children (the default). It applies
	// to the stage's branches too.
	ContinueOnChildFailure bool
	// Branches make the stage a join: when a run comes to it, it fans out
	// at once into one child per branch (named by its key, a child queue
	// of the flow), run in parallel, and Handler runs once, when every
	// branch has ended (JoinAny: when the first is done), with each
	// branch's StageResult.Fields merged into the state and Run.Children
	// saying how each ended (its Queue is the branch's name). A branch
	// that ends dead fails the run, unless ContinueOnChildFailure. At
	// most 64 branches.
	Branches map[string]Branch
	// JoinAny runs the join when the first branch is done; the others are
	// cancelled (their later ends change nothing).
	JoinAny bool
}

// Branch is one branch of a join (Stage.Branches): a child queue whose
// handler sees the run's state, as read when its taking starts, and
// whose result's Fields are merged into the run's state when it ends
// done, in the same atomic step. A branch's result sets Fields only: with
// Children, Sleep, Again or Await it fails its attempt for good, the
// field named.
type Branch struct {
	Handler StageHandler
	// Queue sets the branch queue's concurrency and its retry, timeout
	// and dead-set settings. Its Handler must be nil.
	Queue QueueConfig
}

// StageHandler runs one stage of a flow run. It returns the fields to merge
// into the run's state and, optionally, children to fan out. An error is a
// failed attempt of the stage, as for a Handler.
type StageHandler interface {
	HandleStage(ctx context.Context, r *Run) (*StageResult, error)
}

// StageHandlerFunc adapts a function to StageHandler.
type StageHandlerFunc func(ctx context.Context, r *Run) (*StageResult, error)

// HandleStage calls f(ctx, r).
func (f StageHandlerFunc) HandleStage(ctx context.Context, r *Run) (*StageResult, error) {
	return f(ctx, r)
}

// StageResult is what a stage hands back. A nil *StageResult is an empty one.
type StageResult struct {
	// Fields are merged into the run's state.
	Fields map[string]string
	// Children are fanned out; each must name a queue the stage declared.
	// The run continues to the next stage when all of them have ended.
	// At most 1,000 children.
	//
	// Fields and Children are written in the same atomic step as the
	// stage's end, which must stay short: at most 1,000 fields (names of 1
	// to 200 bytes), and fields, payloads and metadata together at most
	// 4 MiB or, when it is larger, Config.MaxPayloadBytes (so that a single
	// payload the configuration allows still fits).
	Children []ChildSpec
	// Sleep is a durable timer: the run waits this long (on Redis's clock,
	// in Redis: it costs nothing while it sleeps and outlives any restart
	// of workers, or of Redis with AOF) before its next stage starts,
	// within a ReaperInterval of its time. Weeks are fine. Not with
	// Children; after the last stage only with Again.
	Sleep time.Duration
	// Again runs this stage again next instead of the next one, with a
	// fresh Attempt and the state as merged: with Sleep, a stage that polls
	// until a condition holds. Not with Children.
	Again bool
	// Await makes the run wait for the signal of this name
	// (Client.Signal) before its next stage: the stage then finds the
	// signal's payload as state field Await, or, when Sleep (the bound of
	// the wait; 0: none) passed first, no such field. A signal sent before
	// the run awaits it is kept and taken here at once. At most 200 bytes;
	// not with Children; after the last stage only with Again.
	Await string
}

// ChildSpec is one child task to fan out.
type ChildSpec struct {
	Queue   string
	Payload []byte
	// Meta is stored with the child, beside its payload, and handed to
	// its handler as Task.Meta: propagation headers such as a trace
	// context (contrib/otel sets it). At most 4,096 bytes once encoded.
	Meta map[string]string
}

// Run is a flow run as a stage handler sees it.
type Run struct {
	ID    string
	Flow  string
	Stage string
	// State holds the run's fields: the initial ones and every stage's.
	State map[string]string
	// Children lists the children of earlier fan-outs with their outcomes.
	Children []ChildResult
	// Attempt is 1 on the stage's first run, plus its failed attempts.
	Attempt int
	// Meta is the metadata the run was started with (RunOpts.Meta; nil
	// when none). Changes are not stored.
	Meta map[string]string
}

// ChildResult is one child of a run and how it ended.
type ChildResult struct {
	ID     string
	Queue  string
	Status string // pending, done, failed, cancelled
	Result []byte
	Err    string
}

// RunStatus is where a flow run stands.
type RunStatus string

// The statuses of a run.
const (
	RunRunning   RunStatus = "running"
	RunDone      RunStatus = "done"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
)

// RunInfo is what Redis holds about a flow run: the run as its current
// stage sees it (Stage is the current stage, or the last one once ended;
// Attempt counts that stage's runs) and where it stands.
type RunInfo struct {
	Run
	Status RunStatus
	// TaskState is the state of the run's current stage task (queued,
	// active, scheduled, dead, or "children" while waiting for children);
	// once the run ended, its status (done, failed, cancelled).
	TaskState  string
	LastError  string
	FinishedAt time.Time
	// WakeAt is when the run's stage task, scheduled, is due: the end of a
	// sleep (StageResult.Sleep), the bound of a wait for a signal
	// (Awaiting; zero for a wait without bound), or a retry; zero
	// otherwise. Inspector.Run reads it.
	WakeAt time.Time
	// Awaiting is the signal the run waits for (StageResult.Await).
	Awaiting string
}

// validate checks the flow and fills defaults on a copy.
func (f *Flow) validate() (*Flow, error) {
	if f == nil {
		return nil, invalid("Flow", "is nil")
	}
	out := *f
	field := fmt.Sprintf("Flow[%q]", f.Name)
	if err := checkName("Flow.Name", f.Name); err != nil {
		return nil, err
	}
	if len(f.Stages) == 0 {
		return nil, invalid(field+".Stages", "is empty: a flow needs at least one stage")
	}
	switch {
	case out.Retention == 0:
		out.Retention = defaults.RunRetention
	case out.Retention < time.Millisecond:
		return nil, invalid(field+".Retention", "(%s) must be at least 1ms", out.Retention)
	}
	seen := map[string]string{f.Name: "the flow's name"}
	claim := func(name, what string) error {
		if prev, ok := seen[name]; ok {
			return invalid(what, "%q is already used by %s (stage and child queue names must be unique within a flow and differ from its name)", name, prev)
		}
		seen[name] = what
		return nil
	}
	out.Stages = make([]Stage, len(f.Stages))
	var err error
	for i, s := range f.Stages {
		sf := fmt.Sprintf("%s.Stages[%d]", field, i)
		if err := checkName(sf+".Name", s.Name); err != nil {
			return nil, err
		}
		if err := claim(s.Name, sf+".Name"); err != nil {
			return nil, err
		}
		if s.Handler == nil {
			return nil, invalid(sf+".Handler", "is nil")
		}
		if s.Queue.Handler != nil {
			return nil, invalid(sf+".Queue.Handler", "must be nil: the stage's Handler runs it")
		}
		if err := s.Queue.noBatch(sf + ".Queue"); err != nil {
			return nil, err
		}
		q := s.Queue
		q.Handler = HandlerFunc(func(context.Context, *Task) error { return nil }) // placeholder for checks
		if q.Concurrency == 0 {
			q.Concurrency = defaultConcurrency
		}
		if q.Concurrency < 0 {
			return nil, invalid(sf+".Queue.Concurrency", "(%d) must not be negative", q.Concurrency)
		}
		if err := q.fill(sf + ".Queue"); err != nil {
			return nil, err
		}
		q.Handler = nil
		s.Queue = q
		children := make(map[string]QueueConfig, len(s.Children))
		for name, c := range s.Children {
			cf := fmt.Sprintf("%s.Children[%q]", sf, name)
			if err := checkName(cf, name); err != nil {
				return nil, err
			}
			if err := claim(name, cf); err != nil {
				return nil, err
			}
			if err := c.noBatch(cf); err != nil {
				return nil, err
			}
			if c.Handler == nil {
				return nil, invalid(cf+".Handler", "is nil")
			}
			if c.Concurrency == 0 {
				c.Concurrency = defaultConcurrency
			}
			if c.Concurrency < 0 {
				return nil, invalid(cf+".Concurrency", "(%d) must not be negative", c.Concurrency)
			}
			if err := c.fill(cf); err != nil {
				return nil, err
			}
			children[name] = c
		}
		s.Children = children
		if s.Branches, err = checkBranches(sf, f.Stages[i].Branches, claim); err != nil {
			return nil, err
		}
		if s.JoinAny && len(s.Branches) == 0 {
			return nil, invalid(sf+".JoinAny", "needs Branches: it says when their join runs")
		}
		out.Stages[i] = s
	}
	for i, p := range f.IndexBy {
		if err := checkName(fmt.Sprintf("%s.IndexBy[%d]", field, i), p); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// checkBranches checks the branches of stage sf (its field name) and
// fills their queues' defaults on a copy; claim reserves each name among
// the flow's queues.
func checkBranches(sf string, bs map[string]Branch, claim func(name, what string) error) (map[string]Branch, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	if len(bs) > engine.MaxBranches {
		return nil, invalid(sf+".Branches", "has %d branches (at most %d per stage)", len(bs), engine.MaxBranches)
	}
	out := make(map[string]Branch, len(bs))
	for name, b := range bs {
		bf := fmt.Sprintf("%s.Branches[%q]", sf, name)
		if err := checkName(bf, name); err != nil {
			return nil, err
		}
		if err := claim(name, bf); err != nil {
			return nil, err
		}
		if b.Handler == nil {
			return nil, invalid(bf+".Handler", "is nil")
		}
		if b.Queue.Handler != nil {
			return nil, invalid(bf+".Queue.Handler", "must be nil: the branch's Handler runs it")
		}
		if err := b.Queue.noBatch(bf + ".Queue"); err != nil {
			return nil, err
		}
		q := b.Queue
		q.Handler = HandlerFunc(func(context.Context, *Task) error { return nil }) // placeholder for checks
		if q.Concurrency == 0 {
			q.Concurrency = defaultConcurrency
		}
		if q.Concurrency < 0 {
			return nil, invalid(bf+".Queue.Concurrency", "(%d) must not be negative", q.Concurrency)
		}
		if err := q.fill(bf + ".Queue"); err != nil {
			return nil, err
		}
		q.Handler = nil
		b.Queue = q
		out[name] = b
	}
	return out, nil
}

// branch returns branch name of stage i of f (nil f: none).
func (f *Flow) branch(i int, name string) (Branch, bool) {
	if f == nil {
		return Branch{}, false
	}
	b, ok := f.Stages[i].Branches[name]
	return b, ok
}

func (f *Flow) ref() rdb.FlowRef {
	return rdb.FlowRef{RetentionMillis: f.Retention.Milliseconds(), IndexBy: f.IndexBy}
}

func (c *Client) flowQueue(f *Flow, queue string) rdb.QueueKeys {
	return c.st.Queue(rdb.QueueRef{Tag: f.Name, Name: queue})
}

// RunOpts are the options of StartRun. A nil *RunOpts is the zero one.
type RunOpts struct {
	// Meta is stored with the run, beside its state, and handed to every
	// stage as Run.Meta: propagation headers such as a trace context
	// (contrib/otel sets it). At most 4,096 bytes once encoded.
	Meta map[string]string
	// ID, when set, is the run's id instead of a fresh one, so that a
	// start repeated after its reply was lost starts nothing: while a run
	// of that id exists (running, or ended and within its retention),
	// StartRun returns the id with ErrDuplicate. Same rules as queue
	// names.
	ID string
	// Children start the run fanned out, as a batch: these children, in
	// child queues its first stage declares (Stage.Children), run first,
	// and the first stage runs once, when the last of them has ended, with
	// Run.Children saying how each ended (its callback; with the stage's
	// ContinueOnChildFailure it runs whatever they did, without it a dead
	// child fails the run). Inspector.Run reads the batch's progress. The
	// bounds of a stage's StageResult.Children apply, state included.
	Children []ChildSpec
}

// StartRun starts a run of flow with the initial state fields and returns its
// id. The run is queued at the back of the first stage's queue, or fanned
// out first (RunOpts.Children). The state
// is bounded as a stage's StageResult.Fields. opts may be nil.
func (c *Client) StartRun(ctx context.Context, flow *Flow, state map[string]string, opts *RunOpts) (string, error) {
	f, err := flow.validate()
	if err != nil {
		return "", err
	}
	if _, err := engine.CheckStateFields("state", state, c.cfg.MaxPayloadBytes, engine.StageBudget(c.cfg.MaxPayloadBytes)); err != nil {
		return "", asInvalid(err)
	}
	var meta string
	id := ""
	if opts != nil {
		if meta, err = encodeMeta("RunOpts.Meta", opts.Meta); err != nil {
			return "", err
		}
		if opts.ID != "" {
			if err := checkName("RunOpts.ID", opts.ID); err != nil {
				return "", err
			}
			id = opts.ID
		}
	}
	if id == "" {
		id = xid.New().String()
	}
	var children []rdb.Child
	if opts != nil && len(opts.Children) > 0 {
		if len(f.Stages[0].Branches) > 0 {
			return "", invalid("RunOpts.Children", "do not apply to a flow whose first stage has Branches: its branches are its fan-out")
		}
		if children, err = batchChildren(f, id, state, opts.Children, c.cfg.MaxPayloadBytes); err != nil {
			return "", err
		}
	}
	if _, known := c.flows.Load(f.Name); !known {
		// Once per flow and client, so the Inspector and the mover see the
		// flow's queues before any worker served them.
		var refs []rdb.QueueRef
		for _, st := range f.Stages {
			refs = append(refs, rdb.QueueRef{Tag: f.Name, Name: st.Name})
			for name := range st.Children {
				refs = append(refs, rdb.QueueRef{Tag: f.Name, Name: name})
			}
			for name := range st.Branches {
				refs = append(refs, rdb.QueueRef{Tag: f.Name, Name: name})
			}
		}
		if err := c.st.AddKnownQueues(ctx, refs); err != nil {
			return "", fmt.Errorf("worqr: start run of %s: %w", f.Name, err)
		}
		c.flows.Store(f.Name, true)
	}
	qk := c.flowQueue(f, f.Stages[0].Name)
	started, err := c.st.FlowStartFannedOut(ctx, qk, id, state, meta, f.ref(), children, !f.Stages[0].ContinueOnChildFailure)
	if err != nil {
		if errors.Is(err, ErrNotReplicated) { // started on the primary
			return id, fmt.Errorf("worqr: start run %s of %s: %w", id, f.Name, err)
		}
		return "", fmt.Errorf("worqr: start run of %s: %w", f.Name, err)
	}
	if !started {
		return id, fmt.Errorf("worqr: start run %s of %s: a run of this id exists: %w", id, f.Name, ErrDuplicate)
	}
	return id, nil
}

// batchChildren checks the children a run of f starts with (RunOpts.Children)
// as a stage's fan-out is checked, the state counted in its budget, and
// gives them their ids.
func batchChildren(f *Flow, id string, state map[string]string, cs []ChildSpec, maxPayload int) ([]rdb.Child, error) {
	var q engine.Queue
	initEngine(&q, rdb.KindStage, f.Stages[0].Name, rdb.QueueKeys{}, &f.Stages[0].Queue, f, 0)
	e := rdb.Done(rdb.KindStage, "", "", id, nil)
	e.Stage = &rdb.StageEnd{}
	if err := q.FanOut(&e, state, engineChildren(cs), maxPayload, engine.FanOutNames{Fields: "state", Children: "RunOpts.Children"}); err != nil {
		return nil, asInvalid(err)
	}
	return e.Stage.Children, nil
}

// checkRunRef checks the flow and the run id that WaitRun is given (only
// the flow's name matters to it).
func checkRunRef(flow *Flow, id string) error {
	if flow == nil {
		return invalid("Flow", "is nil")
	}
	if err := checkName("Flow.Name", flow.Name); err != nil {
		return err
	}
	if id == "" {
		return invalid("id", "is empty")
	}
	return nil
}

// run reads run id of flow for WaitRun, or returns ErrTaskNotFound (the
// Inspector's Run is the public read).
func (c *Client) run(ctx context.Context, flow *Flow, id string) (*RunInfo, error) {
	if err := checkRunRef(flow, id); err != nil {
		return nil, err
	}
	r, err := c.st.Run(ctx, c.flowQueue(flow, flow.Name), id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, ErrTaskNotFound
	}
	return runInfo(flow.Name, r), nil
}

func runInfo(flow string, r *rdb.RunRecord) *RunInfo {
	if r.Awaiting != "" && r.DueMs > time.Now().Add(unboundedWait).UnixMilli() {
		r.DueMs = 0 // a wait without bound sleeps 100 years (see flow.lua)
	}
	return &RunInfo{
		Run: Run{ID: r.ID, Flow: flow, Stage: r.Stage, State: r.State, Children: childResults(r.Children),
			Attempt: r.Attempt, Meta: engine.DecodeMeta(r.Meta)},
		Status: RunStatus(r.Status), TaskState: r.TaskState, LastError: r.LastError, FinishedAt: msTime(r.FinishedAt),
		WakeAt: msTime(r.DueMs), Awaiting: r.Awaiting,
	}
}

func childResults(cs []rdb.ChildRecord) []ChildResult {
	out := make([]ChildResult, len(cs))
	for i, c := range cs {
		out[i] = ChildResult{ID: c.ID, Queue: c.Queue, Status: c.Status, Result: c.Result, Err: c.Err}
	}
	return out
}

// Signal sends signal name of run id of flow, with payload: a run that
// waits for it (StageResult.Await) gets payload as its state field name
// and its next stage starts now; one that does not yet is kept for 24 h
// for the stage end that awaits it (at most 16 names per run: a 17th is
// refused while none of them has expired). It reports whether the run
// got it now (false: kept). sigID (say, a webhook's delivery id) makes a
// repeat safe: a signal of an id the run took already (of its last 256)
// answers ErrDuplicate and changes nothing; without one, a repeat after a
// lost reply may be kept again. A run that is not
// running (unknown, or ended) answers ErrTaskNotFound.
func (c *Client) Signal(ctx context.Context, flow *Flow, id, name string, payload []byte, sigID string) (bool, error) {
	if err := checkRunRef(flow, id); err != nil {
		return false, err
	}
	switch {
	case name == "":
		return false, invalid("name", "is empty")
	case len(name) > engine.MaxFieldNameLen:
		return false, invalid("name", "is %d bytes long (a state field's name: at most %d)", len(name), engine.MaxFieldNameLen)
	case len(payload) > c.cfg.MaxPayloadBytes:
		return false, invalid("payload", "is %d bytes, over MaxPayloadBytes (%d)", len(payload), c.cfg.MaxPayloadBytes)
	case len(sigID) > engine.MaxFieldNameLen:
		return false, invalid("sigID", "is %d bytes long (at most %d)", len(sigID), engine.MaxFieldNameLen)
	}
	out, err := c.st.Signal(ctx, c.flowQueue(flow, flow.Name), id, name, payload, sigID, signalKeptFor.Milliseconds())
	switch {
	case err != nil:
		return false, fmt.Errorf("worqr: signal %s of run %s: %w", name, id, err)
	case out == rdb.SignalGone:
		return false, fmt.Errorf("worqr: signal %s of run %s: the run is not running: %w", name, id, ErrTaskNotFound)
	case out == rdb.SignalTaken:
		return false, fmt.Errorf("worqr: signal %s of run %s: signal %s was taken already: %w", name, id, sigID, ErrDuplicate)
	case out == rdb.SignalFull:
		return false, invalid("name", "(%s): run %s keeps %d signals of other names it does not await yet (at most %d)", name, id, rdb.MaxKeptSignals, rdb.MaxKeptSignals)
	}
	now := out == rdb.SignalDelivered
	e := Event{Kind: EventSignalled, At: time.Now(), TaskID: id}
	if now {
		e.Count = 1
	}
	c.bus.add(e)
	return now, nil
}

// SignalRuns sends signal name, as Signal does, to every running run of
// flow whose state field prop (declared in Flow.IndexBy) is value: a
// webhook that knows an order's id, not its run's. It returns how many
// runs got it (now or kept). sigID makes a repeat safe per run; a run
// that ended, or took sigID already, meanwhile is skipped. The runs are
// found as Inspector.FindRuns finds them.
func (c *Client) SignalRuns(ctx context.Context, flow *Flow, prop, value, name string, payload []byte, sigID string) (int, error) {
	f, err := flow.validate()
	if err != nil {
		return 0, err
	}
	if !slices.Contains(f.IndexBy, prop) {
		return 0, invalid("prop", "%q is not in Flow.IndexBy of %s", prop, f.Name)
	}
	qk := c.flowQueue(f, f.Name)
	ids, err := c.st.FindRuns(ctx, qk, prop, value)
	if err != nil {
		return 0, fmt.Errorf("worqr: signal %s: find runs: %w", name, err)
	}
	n := 0
	for _, id := range ids {
		_, err := c.Signal(ctx, f, id, name, payload, sigID)
		switch {
		case err == nil:
			n++
		case errors.Is(err, ErrTaskNotFound) || errors.Is(err, ErrDuplicate):
		default:
			return n, err
		}
	}
	return n, nil
}

// unboundedWait: a run asleep longer than this waits for a signal without
// bound.
const unboundedWait = 50 * 365 * 24 * time.Hour

// signalKeptFor is how long a signal sent before its run awaits it is kept.
const signalKeptFor = 24 * time.Hour

// CancelRun ends a running run as cancelled: its waiting stage task and
// children are removed, running ones are told to stop, and their later
// finishes change nothing. It reports whether the run was running.
func (c *Client) CancelRun(ctx context.Context, flow *Flow, id string) (bool, error) {
	f, err := flow.validate()
	if err != nil {
		return false, err
	}
	if id == "" {
		return false, invalid("id", "is empty")
	}
	r, err := c.st.RunCancel(ctx, c.flowQueue(f, f.Name), id, f.ref())
	if err != nil {
		return false, fmt.Errorf("worqr: cancel run %s: %w", id, err)
	}
	runCancelEvents(c.bus, f.Name, id, r)
	return r.Cancelled, nil
}

// runCancelEvents adds the events of run id's cancel r to bus. The run's
// own event carries its stage's queue when the cancel took the stage task
// out of where it waited, and so does one per child taken out: those
// cancels are counted in the history as a task's Cancel is. A stage or a
// child that was running ends later with a cancelled event of its own (a
// stage's carries the run's id: a follower may see the run's id cancelled
// twice, the run's event then without a queue, not counted).
func runCancelEvents(bus *eventBus, flow, id string, r rdb.RunStop) {
	if !r.Cancelled {
		return
	}
	now := time.Now()
	e := Event{Kind: EventCancelled, At: now, TaskID: id}
	if r.Stage != "" {
		e.Queue = rdb.QueueRef{Tag: flow, Name: r.Stage}.Member()
	}
	bus.add(e)
	for _, k := range r.Children {
		bus.add(Event{Kind: EventCancelled, At: now, Queue: rdb.QueueRef{Tag: flow, Name: k.Queue}.Member(), TaskID: k.ID})
	}
}

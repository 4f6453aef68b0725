package integration_test

import (
	"context"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// flQK returns the keys of queue (a stage or child queue) of flow.
func (e *env) flQK(flow, queue string) rdb.QueueKeys {
	return e.keys.Queue(rdb.QueueRef{Tag: flow, Name: queue})
}

// flWaiting returns the waiting ids of a flow's stage or child queue, front
// first.
func (e *env) flWaiting(flow, queue string) []string {
	GinkgoHelper()
	ids, err := redis.Strings(e.do("LRANGE", e.flQK(flow, queue).Waiting, 0, -1))
	Expect(err).NotTo(HaveOccurred())
	return ids
}

// flHash returns the raw hash of a run (or a child task) of flow.
func (e *env) flHash(flow, id string) map[string]string {
	GinkgoHelper()
	m, err := redis.StringMap(e.do("HGETALL", e.flQK(flow, flow).Task(id)))
	Expect(err).NotTo(HaveOccurred())
	return m
}

// flChildFields returns the run's k:<child> fields (child id -> status).
func (e *env) flChildFields(flow, id string) map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	for k, v := range e.flHash(flow, id) {
		if strings.HasPrefix(k, "k:") {
			out[k[2:]] = v
		}
	}
	return out
}

// flChildTasks returns the ids of the task hashes of flow whose parent run is
// id: the children that exist in Redis right now.
func (e *env) flChildTasks(flow, id string) []string {
	GinkgoHelper()
	prefix := e.flQK(flow, flow).TaskPrefix
	var out []string
	for _, k := range e.keysWith(prefix) {
		pr, err := redis.String(e.do("HGET", k, "pr"))
		if err == redis.ErrNil {
			continue
		}
		Expect(err).NotTo(HaveOccurred())
		if pr == id {
			out = append(out, strings.TrimPrefix(k, prefix))
		}
	}
	sort.Strings(out)
	return out
}

func (e *env) flStart(f *worqr.Flow, state map[string]string) string {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	id, err := e.client.StartRun(ctx, f, state, nil)
	Expect(err).NotTo(HaveOccurred())
	return id
}

func (e *env) flStartN(f *worqr.Flow, n int) []string {
	GinkgoHelper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.flStart(f, nil)
	}
	return ids
}

func (e *env) flRun(f *worqr.Flow, id string) *worqr.RunInfo {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	info, err := e.in.Run(ctx, f.Name, id)
	Expect(err).NotTo(HaveOccurred())
	return info
}

// flStatus is a poll function for Eventually.
func (e *env) flStatus(f *worqr.Flow, id string) func() worqr.RunStatus {
	return func() worqr.RunStatus {
		GinkgoHelper()
		return e.flRun(f, id).Status
	}
}

// flRegister lists a worker id the spec drives by hand, alive for ttl,
// serving the given queues of flow (so that a reaper pass looks at them).
func (e *env) flRegister(ttl time.Duration, flow string, queues ...string) string {
	GinkgoHelper()
	refs := make([]rdb.QueueRef, len(queues))
	for i, q := range queues {
		refs[i] = rdb.QueueRef{Tag: flow, Name: q}
	}
	return e.registerRefs(ttl, refs)
}

// flTakeStage takes up to n runs waiting in a stage queue for hand-driven
// worker w.
func (e *env) flTakeStage(w string, f *worqr.Flow, stage string, n int) []rdb.Taken {
	GinkgoHelper()
	return e.flTake(w, f, stage, n, true)
}

// flTakeChild takes up to n children waiting in a child queue for hand-driven
// worker w.
func (e *env) flTakeChild(w string, f *worqr.Flow, queue string, n int) []rdb.Taken {
	GinkgoHelper()
	return e.flTake(w, f, queue, n, false)
}

func (e *env) flTake(w string, f *worqr.Flow, queue string, n int, stage bool) []rdb.Taken {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	got, err := e.st.Take(ctx, e.flQK(f.Name, queue), rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: n, Stage: stage})
	Expect(err).NotTo(HaveOccurred())
	for _, t := range got {
		Expect(t.PID).NotTo(BeEmpty(), "task %s buried by take: %s", t.ID, t.Reason)
	}
	return got
}

// flRef is what the flow scripts get for f, as a Worker passes it.
func flRef(f *worqr.Flow) rdb.FlowRef {
	ret := f.Retention
	if ret == 0 {
		ret = defaults.RunRetention
	}
	return rdb.FlowRef{RetentionMillis: ret.Milliseconds(), IndexBy: f.IndexBy}
}

// flStageIndex returns the index of the stage named, or of the stage that
// declares the child queue named.
func flStageIndex(f *worqr.Flow, queue string) int {
	GinkgoHelper()
	for i, s := range f.Stages {
		if s.Name == queue {
			return i
		}
		if _, ok := s.Children[queue]; ok {
			return i
		}
	}
	Fail("no stage or child queue " + queue + " in flow " + f.Name)
	return -1
}

// flNext is the stage after queue's stage ("" after the last).
func flNext(f *worqr.Flow, queue string) string {
	i := flStageIndex(f, queue)
	if i+1 < len(f.Stages) {
		return f.Stages[i+1].Name
	}
	return ""
}

// flPrefixed turns state fields into the "f:"-prefixed pairs the scripts take.
func flPrefixed(fields map[string]string) []string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []string
	for _, k := range names {
		out = append(out, "f:"+k, fields[k])
	}
	return out
}

// flKids returns n child specs of queue with fresh ids.
func flKids(queue string, n int) []rdb.Child {
	out := make([]rdb.Child, n)
	for i := range out {
		out[i] = rdb.Child{ID: xid.New().String(), Queue: queue, Payload: []byte(queue)}
	}
	return out
}

// flFinish ends hand-driven worker w's taking t of a stage as done,
// merging fields and fanning out children, as a Worker would: a stage end.
func (e *env) flFinish(w string, f *worqr.Flow, stage string, t rdb.Taken, fields map[string]string, children []rdb.Child) (rdb.Outcome, error) {
	en := rdb.Done(rdb.KindStage, w, t.PID, t.ID, nil)
	en.Stage = &rdb.StageEnd{
		Next: flNext(f, stage), FailFast: !f.Stages[flStageIndex(f, stage)].ContinueOnChildFailure,
		RunRetentionMs: flRef(f).RetentionMillis, IndexBy: f.IndexBy,
		Fields: flPrefixed(fields), Children: children,
	}
	got, err := e.end(nil, e.flQK(f.Name, stage), en)
	return got.Outcome, err
}

// flChildFinish ends hand-driven worker w's taking t of a child as done
// with result, on connection c (a pooled one when nil), as a Worker would: a
// child end, which reports the child's outcome and its run's.
func (e *env) flChildFinish(c redis.Conn, w string, f *worqr.Flow, queue string, t rdb.Taken, result string) (child, run rdb.Outcome, err error) {
	var st *rdb.Store
	if c != nil {
		st = rdb.NewStore(oneConn{c}, e.ns)
	}
	en := rdb.Done(rdb.KindChild, w, t.PID, t.ID, []byte(result))
	en.Run = t.Parent
	got, err := e.end(st, e.flQK(f.Name, queue), en)
	return got.Outcome, got.Run, err
}

// oneConn is a ConnGetter that hands out one connection the spec opened
// beforehand (and closes itself), so that calls made through it start at
// once, without a dial.
type oneConn struct{ c redis.Conn }

func (o oneConn) GetContext(context.Context) (redis.Conn, error) { return keptConn{o.c}, nil }

// keptConn is a connection whose Close leaves the real one open.
type keptConn struct{ redis.Conn }

func (keptConn) Close() error { return nil }

func (k keptConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(k.Conn, ctx, cmd, args...)
}

func (k keptConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(k.Conn, d, cmd, args...)
}

func (k keptConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(k.Conn, ctx)
}

func (k keptConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(k.Conn, d)
}

// flWorkerConfig returns a config serving flows with the suite's short
// timings.
func (e *env) flWorkerConfig(rec *recorder, flows ...*worqr.Flow) *worqr.WorkerConfig {
	cfg := e.workerConfig(nil, rec)
	cfg.Flows = flows
	return cfg
}

// flStageFunc adapts a function to worqr.StageHandler.
type flStageFunc = worqr.StageHandlerFunc

// flFieldsStage returns a stage handler that returns the given fields at once.
func flFieldsStage(kv ...string) worqr.StageHandler {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return flStageFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return &worqr.StageResult{Fields: m}, nil
	})
}

// flLog records which runs each stage (or child queue) saw, in order.
type flLog struct {
	mu   sync.Mutex
	seen map[string][]string // queue -> ids
	runs map[string][]*worqr.Run
}

func (l *flLog) add(queue, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string][]string{}
	}
	l.seen[queue] = append(l.seen[queue], id)
}

func (l *flLog) addRun(r *worqr.Run) {
	l.add(r.Stage, r.ID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string][]*worqr.Run{}
	}
	l.runs[r.Stage] = append(l.runs[r.Stage], r)
}

// of returns the ids queue saw, in order.
func (l *flLog) of(queue string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen[queue]...)
}

// ofFn is of as a poll function.
func (l *flLog) ofFn(queue string) func() []string {
	return func() []string { return l.of(queue) }
}

func (l *flLog) runsOf(stage string) []*worqr.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*worqr.Run(nil), l.runs[stage]...)
}

// recordStage returns a stage handler that logs the run and returns fields.
func (l *flLog) recordStage(kv ...string) worqr.StageHandler {
	inner := flFieldsStage(kv...)
	return flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
		l.addRun(r)
		return inner.HandleStage(ctx, r)
	})
}

// recordChild returns a child handler that logs the child and sets result.
func (l *flLog) recordChild(result string) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		l.add(t.Queue, t.ID)
		t.SetResult([]byte(result))
		return nil
	})
}

// flEvents returns the kinds of rec's events about task id in queue.
func (r *recorder) flEvents(queue, id string) []worqr.EventKind {
	var out []worqr.EventKind
	for _, ev := range r.all() {
		// Events name a flow's queue "<flow>/<queue>".
		if _, q, ok := strings.Cut(ev.Queue, "/"); ev.TaskID == id && ok && q == queue {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// flChildStatuses maps each child of info to its status.
func flChildStatuses(info *worqr.RunInfo) map[string]string {
	out := map[string]string{}
	for _, c := range info.Children {
		out[c.ID] = c.Status
	}
	return out
}

// The built-in flow of cmd/worqr-example (flow.go), which `worqr-example
// worker --flow` serves. flAccessFlow declares the same flow (name, stages,
// child queues, index) with the spec's handlers, for in-process peers.
const (
	flAccessName   = "guild-access"
	flAccessCheck  = "access-check"
	flMembership   = "update-membership"
	flManageReward = "manage-reward"
	flNotify       = "notify"
)

var flPlatforms = []string{"discord", "telegram"}

// flAccessFlow returns the built-in flow with handlers that log to log and
// return the fields the binary's do; children record "<who>:<queue>".
func flAccessFlow(log *flLog, who string) *worqr.Flow {
	q := worqr.QueueConfig{Concurrency: 2}
	reward := worqr.Stage{Name: flManageReward, Queue: q, Children: map[string]worqr.QueueConfig{},
		Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			log.addRun(r)
			res := &worqr.StageResult{Fields: map[string]string{"rewards": strings.Join(flPlatforms, ",")}}
			for _, p := range flPlatforms {
				res.Children = append(res.Children, worqr.ChildSpec{Queue: p, Payload: []byte(r.State["userId"])})
			}
			return res, nil
		})}
	for _, p := range flPlatforms {
		reward.Children[p] = one(log.recordChild(who+":"+p), 2)
	}
	return &worqr.Flow{Name: flAccessName, IndexBy: []string{"userId"}, Stages: []worqr.Stage{
		{Name: flAccessCheck, Queue: q, Handler: log.recordStage("access", "granted")},
		{Name: flMembership, Queue: q, Handler: log.recordStage("membership", "member")},
		reward,
		{Name: flNotify, Queue: q, Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			log.addRun(r)
			return &worqr.StageResult{Fields: map[string]string{"notified": "yes"}}, nil
		})},
	}}
}

// flEnds counts the accepted ends (forwarded, fanned out, done) of task id
// in queue: the lines of the worker processes plus the events of rec.
func flEnds(procs []*workerProc, rec *recorder, queue, id string) int {
	n := 0
	for _, p := range procs {
		for _, l := range p.lines() {
			if len(l) >= 3 && (l[0] == "forwarded" || l[0] == "fanned_out" || l[0] == "done") && l[1] == queue && l[2] == id {
				n++
			}
		}
	}
	for _, k := range rec.flEvents(queue, id) {
		if k == worqr.EventForwarded || k == worqr.EventFannedOut || k == worqr.EventDone {
			n++
		}
	}
	return n
}

package chaos_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

const joinsFlowName = "joins"

// The joins flow's stages, members' queue and branches, in order.
var (
	joinsStages  = []string{"cb", "ja", "jy"}
	joinsAll     = []string{"ba", "bb", "bc"} // ja's branches
	joinsAny     = []string{"ya", "yb"}       // jy's branches
	joinsMembers = "m"                        // the batch's child queue
)

// joinsFlow is the second flow of TestChaosTimers' worker processes: a
// batch's callback, a join on all and a join on any, one after the other.
// A run starts with 2–3 members (RunOpts.Children, child queue m); cb,
// their callback, runs once they have all ended; ja joins branches ba, bb
// and bc; jy joins ya and yb (JoinAny). Each handler logs its start and
// end through logLine, as timersFlow's do: a member with its task id, a
// branch's end with the field it sets (a token of that call: branch, pid,
// unix ns), cb's start with how many members it found done ("<done>/<all>"),
// a join's start with the branches' fields it found ("ba=<token>,...",
// "-" for one absent).
func joinsFlow(logLine func(words ...string)) *worqr.Flow {
	work := func() { time.Sleep(between(2*time.Millisecond, 10*time.Millisecond)) }
	q := worqr.QueueConfig{Concurrency: 8, MaxCrashes: -1, MaxAttempts: 5,
		Backoff: func(int, error) time.Duration { return timersRetry }}
	member := q
	member.Handler = worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
		run, _, _ := strings.Cut(t.ID, ".")
		logLine("start", run, joinsMembers, strconv.Itoa(t.Attempt), t.ID)
		work()
		logLine("end", run, joinsMembers, strconv.Itoa(t.Attempt), t.ID)
		return nil
	})
	branches := func(names []string) map[string]worqr.Branch {
		out := map[string]worqr.Branch{}
		for _, name := range names {
			out[name] = worqr.Branch{Queue: q, Handler: worqr.StageHandlerFunc(
				func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					att := strconv.Itoa(r.Attempt)
					logLine("start", r.ID, name, att, "-")
					work()
					token := fmt.Sprintf("%s.%d.%d", name, os.Getpid(), time.Now().UnixNano())
					logLine("end", r.ID, name, att, token)
					return &worqr.StageResult{Fields: map[string]string{name: token}}, nil
				})}
		}
		return out
	}
	join := func(name string, names []string) worqr.StageHandlerFunc {
		return func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			found := make([]string, len(names))
			for i, b := range names {
				v, ok := r.State[b]
				if !ok {
					v = "-"
				}
				found[i] = b + "=" + v
			}
			att := strconv.Itoa(r.Attempt)
			logLine("start", r.ID, name, att, strings.Join(found, ","))
			work()
			logLine("end", r.ID, name, att, "-")
			return nil, nil
		}
	}
	callback := func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
		done, all := 0, 0
		for _, ch := range r.Children {
			if ch.Queue == joinsMembers {
				all++
				if ch.Status == "done" {
					done++
				}
			}
		}
		att := strconv.Itoa(r.Attempt)
		logLine("start", r.ID, "cb", att, fmt.Sprintf("%d/%d", done, all))
		work()
		logLine("end", r.ID, "cb", att, "-")
		return nil, nil
	}
	return &worqr.Flow{Name: joinsFlowName, Stages: []worqr.Stage{
		{Name: "cb", Queue: q, Children: map[string]worqr.QueueConfig{joinsMembers: member},
			Handler: worqr.StageHandlerFunc(callback)},
		{Name: "ja", Queue: q, Branches: branches(joinsAll), Handler: join("ja", joinsAll)},
		{Name: "jy", Queue: q, Branches: branches(joinsAny), JoinAny: true, Handler: join("jy", joinsAny)},
	}}
}

// joinsQueues are the joins flow's queues, as the Inspector names them.
func joinsQueues() []string {
	var out []string
	for _, q := range append(append(append([]string{joinsMembers}, joinsStages...), joinsAll...), joinsAny...) {
		out = append(out, joinsFlowName+"/"+q)
	}
	return out
}

// joinsPlan is one run of the joins flow: its id (j<seq>) and members.
type joinsPlan struct {
	id      string
	members int
}

// joinsFigures is what joinsCheck counted.
type joinsFigures struct {
	runs, members            int
	callbacks, alls, anys    int // accepted ends of cb, ja, jy
	handlerRuns, cut         int // handler starts; of them, with no end (a kill)
	branchEnds, anyCancelled int // branches' accepted ends; jy's branches cancelled or refused
}

// joinsCheck returns the figures of the joins flow's runs and what in them
// breaks a batch's or a join's promises (see TestChaosTimers): plans are
// the runs started, infos what Redis holds of each (nil: none), lines
// their processes' lines.
func joinsCheck(plans []*joinsPlan, infos map[string]*worqr.RunInfo, lines []timersLine) (joinsFigures, []string) {
	var fig joinsFigures
	var problems []string
	bad := func(p *joinsPlan, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("run %s (joins): ", p.id)+fmt.Sprintf(format, args...))
	}
	type key struct{ run, stage string }
	byRun := map[key][]timersLine{}
	for _, l := range lines {
		byRun[key{l.run, l.stage}] = append(byRun[key{l.run, l.stage}], l)
	}
	for k := range byRun {
		ls := byRun[k]
		sort.Slice(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
		for _, l := range ls {
			switch l.kind {
			case "start":
				fig.handlerRuns++
				if !hasEnd(ls, l) {
					fig.cut++
				}
			case "dead":
				problems = append(problems, fmt.Sprintf("run %s (joins): %s went dead (process %d)", l.run, l.stage, l.proc))
			}
		}
	}
	// count counts the lines of kind of ls, by their field (a child's
	// events: its task id).
	count := func(ls []timersLine, kind string) (int, map[string]int) {
		n, by := 0, map[string]int{}
		for _, l := range ls {
			if l.kind == kind {
				n++
				by[l.got]++
			}
		}
		return n, by
	}
	// tokens are the fields the end lines of ls set.
	tokens := func(ls []timersLine) map[string]bool {
		out := map[string]bool{}
		for _, l := range ls {
			if l.kind == "end" {
				out[l.got] = true
			}
		}
		return out
	}
	// joined checks every start of join stage: it found each branch's
	// field as one of that branch's ends set it (onAny: exactly one
	// branch's, the others none), and returns whether it ran to its end.
	joined := func(p *joinsPlan, stage string, names []string, onAny bool) bool {
		ls := byRun[key{p.id, stage}]
		for _, l := range ls {
			if l.kind != "start" {
				continue
			}
			found := 0
			for _, f := range strings.Split(l.got, ",") {
				b, v, _ := strings.Cut(f, "=")
				switch {
				case v == "-" && !onAny:
					bad(p, "join %s (attempt %d) ran WITHOUT branch %s's field: it found %s", stage, l.attempt, b, l.got)
				case v == "-":
				case !tokens(byRun[key{p.id, b}])[v]:
					bad(p, "join %s found branch %s's field %q, which no end of that branch set", stage, b, v)
				default:
					found++
				}
			}
			if onAny && found != 1 {
				bad(p, "join %s (on any, attempt %d) found %d branches' fields, want 1: %s", stage, l.attempt, found, l.got)
			}
		}
		_, ran := firstLine(ls, "end")
		return ran
	}
	for _, p := range plans {
		fig.runs++
		fig.members += p.members
		info := infos[p.id]
		if info == nil || info.Status != worqr.RunDone {
			st := worqr.RunStatus("unknown")
			if info != nil {
				st = info.Status
			}
			bad(p, "LOST: Redis holds it as %q, want done", st)
		}
		// Accepted ends: each stage's, each member's and each branch's at
		// most once; of jy's branches, one.
		for _, c := range []struct {
			stage, kind string
		}{{"cb", "forwarded"}, {"ja", "fanned_out"}, {"ja", "forwarded"}, {"jy", "fanned_out"}, {"jy", "done"}} {
			if n, _ := count(byRun[key{p.id, c.stage}], c.kind); n > 1 {
				bad(p, "stage %s ACCEPTED %d %s ends (at most 1)", c.stage, n, c.kind)
			}
		}
		n, _ := count(byRun[key{p.id, "cb"}], "forwarded")
		fig.callbacks += n
		n, _ = count(byRun[key{p.id, "ja"}], "forwarded")
		fig.alls += n
		n, _ = count(byRun[key{p.id, "jy"}], "done")
		fig.anys += n
		for _, b := range joinsAll {
			n, _ := count(byRun[key{p.id, b}], "done")
			fig.branchEnds += n
			if n > 1 {
				bad(p, "branch %s ACCEPTED %d ends (at most 1)", b, n)
			}
		}
		anyDone := 0
		for _, b := range joinsAny {
			n, _ := count(byRun[key{p.id, b}], "done")
			anyDone += n
			fig.branchEnds += n
			c, _ := count(byRun[key{p.id, b}], "cancelled")
			l, _ := count(byRun[key{p.id, b}], "lost_end")
			fig.anyCancelled += c + l
		}
		if anyDone > 1 {
			bad(p, "the join on any ACCEPTED %d of its branches' ends (at most 1)", anyDone)
		}
		ms := byRun[key{p.id, joinsMembers}]
		_, accepted := count(ms, "done")
		for id, n := range accepted {
			if n > 1 {
				bad(p, "member %s ACCEPTED %d ends (at most 1)", id, n)
			}
		}
		if _, ended := count(ms, "end"); len(ended) != p.members {
			bad(p, "%d members ran to their end, %d started with it", len(ended), p.members)
		}
		// The callback ran once all members had ended.
		for _, l := range byRun[key{p.id, "cb"}] {
			if want := fmt.Sprintf("%d/%d", p.members, p.members); l.kind == "start" && l.got != want {
				bad(p, "the batch's callback (attempt %d) ran with %s members done, want %s", l.attempt, l.got, want)
			}
		}
		if _, ok := firstLine(byRun[key{p.id, "cb"}], "end"); !ok {
			bad(p, "the batch's callback never ran to its end")
		}
		if !joined(p, "ja", joinsAll, false) {
			bad(p, "the join on all never ran to its end")
		}
		if !joined(p, "jy", joinsAny, true) {
			bad(p, "the join on any never ran to its end")
		}
		if info == nil {
			continue
		}
		// What Redis holds: each fan-out once (a join forwarded twice, or
		// fanned out twice, would hold more children), every member and
		// branch of ja done, one of jy's.
		want := map[string]int{joinsMembers: p.members}
		for _, b := range append(append([]string(nil), joinsAll...), joinsAny...) {
			want[b] = 1
		}
		got, done := map[string]int{}, map[string]int{}
		for _, ch := range info.Children {
			got[ch.Queue]++
			if ch.Status == "done" {
				done[ch.Queue]++
			}
		}
		for q, n := range want {
			if got[q] != n {
				bad(p, "Redis holds %d children in %s, want %d (all: %v)", got[q], q, n, got)
			}
		}
		for _, q := range append([]string{joinsMembers}, joinsAll...) {
			if done[q] != got[q] {
				bad(p, "Redis holds %d of %d children in %s done", done[q], got[q], q)
			}
		}
		if n := done[joinsAny[0]] + done[joinsAny[1]]; n != 1 {
			bad(p, "Redis holds %d of jy's branches done, want 1", n)
		}
	}
	return fig, problems
}

// firstLine returns the first line of kind in ls.
func firstLine(ls []timersLine, kind string) (timersLine, bool) {
	for _, l := range ls {
		if l.kind == kind {
			return l, true
		}
	}
	return timersLine{}, false
}

package rdb_test

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A take buries at most one flow child, the last it takes: burying a
// child fails its run (fail-fast), and the run's stop reads up to
// STOP_SCAN entries of its children's lists. A crash storm of poison
// children, each from its own run, is buried one per take, the others left
// at the front of the child queue in their order (where their runs' stops
// find them), and a wake-up says they wait. Each of k runs here fans out
// two children to c1; each run's first child crashed its workers. The
// poison children wait first, the others behind them, but for r4's second
// child, right behind r4's first: before, a take buried r4.p and handed
// out r4.q, to run for a run that had failed.
func TestTakeBuriesOneChildPerCall(t *testing.T) {
	t.Parallel()
	const k = 5
	const crashed = "crashed: the task was running on 3 workers that died"
	for _, tagged := range []bool{true, false} {
		t.Run("tagged="+strconv.FormatBool(tagged), func(t *testing.T) {
			f := newFlowEnv(t)
			st := f.st // routes by tag: the take reads before it writes ('m')
			if !tagged {
				st = rdb.NewStore(f.pool, f.ns)
			}
			var poison, rest []string
			for r := 0; r < k; r++ {
				id := "r" + strconv.Itoa(r)
				f.start(t, f.s1, id)
				tk := f.takeFrom(t, f.s1, "A", 1, true)
				cs := []rdb.Child{{ID: id + ".p", Queue: "c1", Payload: []byte("x")}, {ID: id + ".q", Queue: "c1", Payload: []byte("y")}}
				f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, id, nil), "s2", true, nil, cs...))
				f.do(t, "HSET", f.c1.Task(id+".p"), "c", "3")
				poison = append(poison, id+".p")
				rest = append(rest, id+".q")
			}
			// The poison children first, then the others.
			f.do(t, "DEL", f.c1.Waiting)
			f.do(t, "RPUSH", redis.Args{f.c1.Waiting}.AddFlat(poison).Add(rest[k-1]).AddFlat(rest[:k-1])...)
			take := func() []rdb.Taken {
				got, err := st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 100, MaxCrashes: 3, Child: true})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			var got []rdb.Taken
			cmds := monitored(t, func(args []string) bool {
				return len(args) > 1 && strings.EqualFold(args[0], "PUBLISH") && strings.HasSuffix(args[1], ":c1")
			}, func() { got = take() })
			if len(got) != 1 || got[0].ID != "r0.p" || got[0].Reason != crashed {
				t.Fatalf("first take: %+v, want r0.p buried alone", got)
			}
			// Its run's stop took r0.q out of c1: the take says so (no end
			// of a taking reports that cancel).
			if want := []rdb.QueuedTask{{Queue: "c1", ID: "r0.q"}}; !reflect.DeepEqual(got[0].Stopped, want) {
				t.Errorf("first take: stopped %+v, want %+v", got[0].Stopped, want)
			}
			left, _ := redis.Strings(f.do(t, "LRANGE", f.c1.Waiting, 0, -1), nil)
			// r0's own second child was put back, then stopped with its run.
			want := append(append(append([]string{}, poison[1:]...), rest[k-1]), rest[1:k-1]...)
			if !reflect.DeepEqual(left, want) {
				t.Fatalf("left in c1: %v, want %v", left, want)
			}
			if len(cmds) != 1 || cmds[0][2] != strconv.Itoa(2*k-1) {
				t.Errorf("wake-ups published on c1: %q, want one for the %d tasks put back", cmds, 2*k-1)
			}
			// Each following take buries the next one; then the queue is empty.
			for r := 1; r < k; r++ {
				got = take()
				if len(got) != 1 || got[0].ID != poison[r] || got[0].Reason != crashed {
					t.Fatalf("take %d: %+v, want %s buried alone", r+1, got, poison[r])
				}
				if want := []rdb.QueuedTask{{Queue: "c1", ID: rest[r]}}; !reflect.DeepEqual(got[0].Stopped, want) {
					t.Errorf("take %d: stopped %+v, want %+v", r+1, got[0].Stopped, want)
				}
			}
			if got = take(); len(got) != 0 {
				t.Fatalf("last take: %+v, want nothing", got)
			}
			for r := 0; r < k; r++ {
				id := "r" + strconv.Itoa(r)
				h, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task(id)), nil)
				if h["fs"] != "failed" || h["k:"+id+".p"] != "failed" || h["k:"+id+".q"] != "cancelled" {
					t.Errorf("run %s: fs=%s p=%s q=%s", id, h["fs"], h["k:"+id+".p"], h["k:"+id+".q"])
				}
			}
			if n, _ := redis.Int(f.do(t, "ZCARD", f.c1.Dead), nil); n != k {
				t.Errorf("dead children: %d, want %d", n, k)
			}
		})
	}
}

package rdb_test

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// keyBatch is a taking of the random run: a key's head and its batch.
type keyBatch struct {
	w     string
	items []rdb.Taken
}

// Ordered queues under random operations: keyed enqueues (now, later, due
// already, past their deadline; merging on or off), takes with and
// without batches by two workers, every kind of end, ends repeated (a lost
// reply) and ends by zombies, the reaper's requeue, releases, cancels, dead
// requeues and deletes, the mover and promote, the dead set's caps,
// MoveOnDead switched, and bulk deletes and cancels. After every step the
// key invariants hold (keyInvariants): no id in two places, one task of a
// key in circulation (its head), every head somewhere, every entry of a
// key's list behind a head. Each seed runs through the tag-routed store
// (the take reads before it writes) or a plain pool, in turn.
// WORQR_KEY_SEEDS runs more seeds (an audit ran 2,100).
func TestKeyedInvariantsUnderRandomOperations(t *testing.T) {
	t.Parallel()
	seeds := 24
	if s := os.Getenv("WORQR_KEY_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for seed := 0; seed < seeds; seed++ {
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { keyedRandomRun(t, int64(seed)) }) {
			return
		}
	}
}

// keyedRandomRun runs 300 random steps of seed, checking the key
// invariants after each.
func keyedRandomRun(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	e := newEnv(t)
	if seed%2 == 1 {
		e.st = rdb.NewStore(e.pool, e.ns) // not routed by tag: the take pops (no 'm')
	}
	e.setCfg(t, e.q, "retention", 600000, "dead_max", 1000)
	var live []keyBatch
	var zombies []keyBatch
	n := 0
	var log []string
	defer func() {
		if t.Failed() {
			for _, l := range log {
				t.Log(l)
			}
		}
	}()
	ids := []string{}
	logf := func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }
	now := e.now(t)
	for step := 0; step < 300 && !t.Failed(); step++ {
		switch op := r.Intn(16); op {
		case 0, 1, 2:
			key := string(rune('A' + r.Intn(2)))
			n++
			id := fmt.Sprintf("%s%d", key, n)
			var a *rdb.EnqueueArgs
			switch r.Intn(6) {
			case 0:
				a = &rdb.EnqueueArgs{DueMillis: now + 100000}
			case 1:
				a = &rdb.EnqueueArgs{DueMillis: now - 1000}
			case 2:
				a = &rdb.EnqueueArgs{DeadlineMs: now - 10}
			}
			out, err := e.st.EnqueueKey(e.ctx, e.q, key, []string{id}, [][]byte{[]byte("p" + strconv.Itoa(r.Intn(4)))}, []string{""}, a)
			if err != nil {
				t.Fatal(err)
			}
			logf("enqueue %s %s %+v -> %+v", key, id, a, out)
			if out[0].Merged {
				if s := e.field(t, out[0].ID, rdb.FieldState); s != rdb.StateQueued && s != rdb.StateScheduled {
					t.Errorf("merged into %s in state %s", out[0].ID, s)
				}
			} else {
				ids = append(ids, id)
			}
		case 3, 4:
			w := []string{"W", "V"}[r.Intn(2)]
			b := []int{0, 3}[r.Intn(2)]
			got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: 1 << 62, Max: 1 + r.Intn(3), Batch: b, MaxCrashes: 3})
			if err != nil {
				t.Fatal(err)
			}
			logf("take %s b%d -> %v", w, b, takenIDs(got))
			for j := 0; j < len(got); {
				k := j + 1
				for k < len(got) && got[k].Head != "" && got[k].Head == got[j].ID {
					k++
				}
				if got[j].PID != "" {
					live = append(live, keyBatch{w, got[j:k]})
				}
				j = k
			}
		case 5, 6, 7:
			if len(live) == 0 {
				continue
			}
			i := r.Intn(len(live))
			b := live[i]
			live = append(live[:i], live[i+1:]...)
			h := b.items[0]
			var en rdb.Ending
			ask := r.Intn(6)
			switch {
			case h.Expired:
				en = rdb.NotRun(b.w, h)
			case ask == 0:
				en = rdb.Retry(rdb.KindTask, b.w, h.PID, h.ID, 0, "x")
			case ask == 1:
				en = rdb.Retry(rdb.KindTask, b.w, h.PID, h.ID, 100000, "x")
			case ask == 2:
				en = rdb.Dead(rdb.KindTask, b.w, h.PID, h.ID, "x")
			case ask == 3:
				en = rdb.GiveBack(rdb.KindTask, b.w, h.PID, h.ID)
			default:
				en = rdb.Done(rdb.KindTask, b.w, h.PID, h.ID, nil)
			}
			if len(b.items) > 1 {
				en = batchOf(en, b.items)
			}
			out, err := e.st.End(e.ctx, e.q, 600000, []rdb.Ending{en})
			if err != nil {
				t.Fatal(err)
			}
			logf("end %s %v ask %s -> %+v", b.w, takenIDs(b.items), en.Ask, out)
			if out[0].Outcome == rdb.OutcomeLost {
				t.Errorf("live end lost")
			}
			if r.Intn(3) == 0 {
				zombies = append(zombies, b) // a repeated end (lost reply)
			}
		case 8:
			w := []string{"W", "V"}[r.Intn(2)]
			_, _, err := e.st.Requeue(e.ctx, e.q, []string{w}, r.Intn(2) == 0)
			if err != nil {
				t.Fatal(err)
			}
			logf("requeue %s", w)
			var keep []keyBatch
			for _, b := range live {
				if b.w == w {
					zombies = append(zombies, b)
				} else {
					keep = append(keep, b)
				}
			}
			live = keep
		case 9:
			if len(zombies) == 0 {
				continue
			}
			b := zombies[r.Intn(len(zombies))]
			en := rdb.Done(rdb.KindTask, b.w, b.items[0].PID, b.items[0].ID, nil)
			if len(b.items) > 1 {
				en = batchOf(en, b.items)
			}
			out, err := e.st.End(e.ctx, e.q, 600000, []rdb.Ending{en})
			if err != nil {
				t.Fatal(err)
			}
			logf("zombie end %v -> %+v", takenIDs(b.items), out)
			if out[0].Outcome != rdb.OutcomeLost {
				t.Errorf("zombie end not lost")
			}
		case 10:
			if len(ids) == 0 {
				continue
			}
			id := ids[r.Intn(len(ids))]
			res, err := e.st.Cancel(e.ctx, e.q, id)
			if err != nil {
				t.Fatal(err)
			}
			logf("cancel %s -> %v", id, res)
		case 11:
			dead := e.strs(t, "ZRANGE", e.q.Dead, 0, -1)
			if len(dead) == 0 {
				continue
			}
			id := dead[r.Intn(len(dead))]
			op := []rdb.DeadOp{rdb.DeadRequeue, rdb.DeadDelete}[r.Intn(2)]
			if _, _, err := e.st.DeadIDs(e.ctx, e.q, op, []string{id}); err != nil {
				t.Fatal(err)
			}
			logf("dead %s %s", op, id)
		case 12:
			if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
				t.Fatal(err)
			}
			sc := e.strs(t, "ZRANGE", e.q.Scheduled, 0, -1)
			if len(sc) > 0 && r.Intn(2) == 0 {
				id := sc[r.Intn(len(sc))]
				if _, err := e.st.Promote(e.ctx, e.q, id); err != nil {
					t.Fatal(err)
				}
				logf("promote %s", id)
			}
			logf("move")
		case 13:
			switch r.Intn(4) {
			case 0:
				e.setCfg(t, e.q, "ondead", []string{"block", "next"}[r.Intn(2)])
			case 1:
				e.setCfg(t, e.q, "merge", []string{"0", "1"}[r.Intn(2)])
			case 2:
				e.setCfg(t, e.q, "dead_max", []int{0, 1, 1000}[r.Intn(3)])
			}
			cfg, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Config))
			logf("cfg %v", cfg)
		case 14:
			if r.Intn(4) != 0 {
				continue
			}
			act := []rdb.BulkAction{rdb.BulkDelete, rdb.BulkCancel}[r.Intn(2)]
			var err error
			switch r.Intn(3) {
			case 0:
				_, err = e.st.Bulk(e.ctx, e.q, rdb.PlaceWaiting, act)
			case 1:
				_, err = e.st.Bulk(e.ctx, e.q, rdb.PlaceScheduled, act)
			case 2:
				_, err = e.st.BulkKeys(e.ctx, e.q, []string{"A", "B"}, act)
			}
			if err != nil {
				t.Fatal(err)
			}
			logf("bulk %s", act)
		case 15:
			w := []string{"W", "V"}[r.Intn(2)]
			var known []string
			var keep []keyBatch
			for _, b := range live {
				if b.w == w && r.Intn(2) == 0 {
					for _, x := range b.items {
						known = append(known, x.PID)
					}
					keep = append(keep, b)
				} else if b.w == w {
					zombies = append(zombies, b)
				} else {
					keep = append(keep, b)
				}
			}
			live = keep
			if _, _, err := e.st.Release(e.ctx, e.q, w, known); err != nil {
				t.Fatal(err)
			}
			logf("release %s known %v", w, known)
		}
		e.keyInvariants(t, fmt.Sprintf("step %d", step))
	}
}

// keyInvariants checks the invariants of ordered queue e.q (keys A and B,
// workers W and V) and fails t, naming where, for each broken one.
func (e *env) keyInvariants(t *testing.T, where string) {
	t.Helper()
	place := map[string][]string{} // id -> places
	add := func(id, p string) { place[id] = append(place[id], p) }
	for _, id := range e.strs(t, "LRANGE", e.q.Waiting, 0, -1) {
		add(id, "waiting")
	}
	for _, id := range e.strs(t, "ZRANGE", e.q.Scheduled, 0, -1) {
		add(id, "scheduled")
	}
	for _, id := range e.strs(t, "ZRANGE", e.q.Dead, 0, -1) {
		add(id, "dead")
	}
	keys := []string{e.q.WorkerQueue("W"), e.q.WorkerQueue("V")}
	for _, k := range keys {
		m, _ := redis.StringMap(e.c.Do("HGETALL", k))
		for _, id := range m {
			add(id, "held")
		}
	}
	lists := []string{e.q.KeyListPrefix + "A", e.q.KeyListPrefix + "B"}
	inList := map[string]string{}
	for _, l := range lists {
		key := strings.TrimPrefix(l, e.q.KeyListPrefix)
		for _, en := range e.strs(t, "LRANGE", l, 0, -1) {
			id, _, _ := strings.Cut(en, "@")
			add(id, "list:"+key)
			inList[id] = key
		}
	}
	for id, ps := range place {
		if len(ps) > 1 {
			t.Errorf("%s: %s is in %v", where, id, ps)
		}
	}
	heads, _ := redis.StringMap(e.c.Do("HGETALL", e.q.KeyHeads))
	// each key: circulating tasks (not in list) that are not the head and not batch members
	circ := map[string][]string{}
	for id, ps := range place {
		if strings.HasPrefix(ps[0], "list:") || ps[0] == "dead" {
			continue
		}
		okey := e.field(t, id, rdb.FieldKey)
		if okey == "" {
			continue
		}
		if e.field(t, id, rdb.FieldBatchOf) != "" && ps[0] == "held" {
			continue
		}
		circ[okey] = append(circ[okey], id+"("+ps[0]+")")
		if heads[okey] != id {
			t.Errorf("%s: %s of key %s is %s but the key's head is %q", where, id, okey, ps[0], heads[okey])
		}
	}
	for k, ids := range circ {
		if len(ids) > 1 {
			sort.Strings(ids)
			t.Errorf("%s: key %s has %v circulating", where, k, ids)
		}
	}
	for k, h := range heads {
		ps := place[h]
		if len(ps) == 0 {
			s := e.field(t, h, rdb.FieldState)
			t.Errorf("%s: key %s's head %s is nowhere (state %q)", where, k, h, s)
		}
		if len(ps) > 0 && strings.HasPrefix(ps[0], "list:") {
			t.Errorf("%s: key %s's head %s is in a list", where, k, h)
		}
	}
	for id, key := range inList {
		if heads[key] == "" {
			t.Errorf("%s: %s waits in key %s's list, which has no head", where, id, key)
		}
		if s := e.field(t, id, rdb.FieldState); s != rdb.StateQueued && s != rdb.StateCancelled {
			t.Errorf("%s: %s in key list with state %q", where, id, s)
		}
	}
}

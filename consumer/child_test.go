package consumer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// The kill -9 test: consumer processes (this test binary, re-executed with
// childEnv set) share one consumer; the test kills them with SIGKILL and
// starts new ones while they work, and checks from their logs and from
// Redis that no index is skipped, none runs twice at once, the processed
// index never passes an unfinished job nor goes down, and the limits hold.

const (
	childEnv   = "WORQR_CONSUMER_CHILD" // the log file: run as a consumer process
	childRedis = "WORQR_CONSUMER_CHILD_REDIS"
	childNS    = "WORQR_CONSUMER_CHILD_NS"

	killJobs    = 300
	killMaxProc = 6
	killAhead   = 12
)

// failsFirst says whether the first attempt of index i fails.
func failsFirst(i uint64) bool { return i%9 == 4 }

type headOf uint64

func (h headOf) Head(context.Context) (uint64, error)                { return uint64(h), nil }
func (h headOf) AtIndex(_ context.Context, i uint64) (uint64, error) { return i, nil }

// childMain is a consumer process: it works consumer "kill" until killed,
// logging "S <i> <ns> <processed>" when a job starts, "E <i> <ns>" when it
// is done and "F <i> <ns>" when an attempt fails, each line written at
// once (a SIGKILL loses nothing written).
func childMain() int {
	f, err := os.OpenFile(os.Getenv(childEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, format+"\n", args...)
	}
	pool := &redis.Pool{MaxIdle: 16, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, os.Getenv(childRedis))
	}}
	ns := os.Getenv(childNS)
	var c *consumer.Consumer[uint64]
	c, err = consumer.New(pool, &consumer.Config[uint64]{
		Name: "kill", Source: headOf(killJobs - 1), MaxProcessing: killMaxProc, MaxSearchAhead: killAhead, Concurrency: 4,
		// No crash limit: on a starved machine a process that misses its
		// keepalive counts as a crash of the job it runs too, and a job
		// buried after 5 would stop progress (by design) mid-test.
		MaxCrashes: -1,
		Backoff:    func(int, error) time.Duration { return 20 * time.Millisecond },
		Process: func(ctx context.Context, i uint64, _ uint64) error {
			p, err := c.ProcessedIndex(ctx)
			if err != nil {
				return err
			}
			logf("S %d %d %d", i, time.Now().UnixNano(), p)
			time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
			if failsFirst(i) {
				conn, err := pool.GetContext(ctx)
				if err != nil {
					return err
				}
				n, err := redis.Int(conn.Do("INCR", ns+":test:fail:"+strconv.FormatUint(i, 10)))
				conn.Close()
				if err != nil {
					return err
				}
				if n == 1 {
					logf("F %d %d", i, time.Now().UnixNano())
					return errors.New("first attempt fails")
				}
			}
			logf("E %d %d", i, time.Now().UnixNano())
			return nil
		},
		Worker: worqr.WorkerConfig{
			Config:            worqr.Config{Namespace: ns, DisableEvents: true},
			HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 1500 * time.Millisecond,
			ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond,
			OnEvent: func(e worqr.Event) {
				if e.Kind == worqr.EventKeepaliveLost {
					logf("K 0 %d", time.Now().UnixNano())
				}
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-c.Stopped()
	return 0
}

// child is one consumer process the test started.
type child struct {
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	diedAt time.Time // when Wait returned after the kill
}

func startChild(t *testing.T, dir, ns string, n int) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ch := &child{log: filepath.Join(dir, fmt.Sprintf("child-%d.log", n)), exited: make(chan struct{})}
	ch.cmd = exec.Command(exe, "-test.run=^$")
	ch.cmd.Env = append(os.Environ(), childEnv+"="+ch.log, childRedis+"="+srv.URL, childNS+"="+ns)
	ch.cmd.Stderr = os.Stderr
	if err := ch.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = ch.cmd.Wait()
		ch.diedAt = time.Now()
		close(ch.exited)
	}()
	return ch
}

func (ch *child) kill() {
	_ = ch.cmd.Process.Signal(syscall.SIGKILL)
	<-ch.exited
}

// run is one run of an index in one process: from its S line to its E or
// F line, or to the process's death.
type run struct {
	i          uint64
	start, end int64
	ok, failed bool
	processed  uint64 // the processed index read as it started
	proc       int
	zombie     bool // its process lost its keepalive at some point
}

// readRuns parses the children's logs.
func readRuns(t *testing.T, children []*child) []run {
	t.Helper()
	var out []run
	for n, ch := range children {
		f, err := os.Open(ch.log)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		open := map[uint64]int{} // index -> its run in out
		from := len(out)
		zombie := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 {
				continue // a line cut by the kill
			}
			i, _ := strconv.ParseUint(fs[1], 10, 64)
			at, _ := strconv.ParseInt(fs[2], 10, 64)
			switch fs[0] {
			case "S":
				if len(fs) < 4 {
					continue
				}
				p, _ := strconv.ParseUint(fs[3], 10, 64)
				open[i] = len(out)
				out = append(out, run{i: i, start: at, end: -1, processed: p, proc: n})
			case "K":
				zombie = true
			case "E", "F":
				if k, ok := open[i]; ok {
					out[k].end, out[k].ok, out[k].failed = at, fs[0] == "E", fs[0] == "F"
					delete(open, i)
				}
			}
		}
		f.Close()
		for k := from; k < len(out); k++ {
			out[k].zombie = zombie
		}
		for _, k := range open {
			select {
			case <-ch.exited:
				out[k].end = ch.diedAt.UnixNano()
			default:
				out[k].end = time.Now().UnixNano() // still running
			}
		}
	}
	return out
}

func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	c, err := consumer.New(b.pool, &consumer.Config[uint64]{Name: "kill", Source: headOf(killJobs - 1),
		Process: func(context.Context, uint64, uint64) error { return nil }, Worker: b.fast()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var children []*child
	live := func() []*child {
		var out []*child
		for _, ch := range children {
			select {
			case <-ch.exited:
			default:
				out = append(out, ch)
			}
		}
		return out
	}
	for len(children) < 3 {
		children = append(children, startChild(t, dir, b.ns, len(children)))
	}
	defer func() {
		for _, ch := range children {
			ch.kill()
		}
	}()

	// Watch the processed index: never down, never past an index with no
	// finished run in the logs.
	var last uint64
	watch := func() uint64 {
		p, err := c.ProcessedIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p < last {
			t.Fatalf("processed index went down: %d after %d", p, last)
		}
		last = p
		done := map[uint64]bool{}
		for _, r := range readRuns(t, children) {
			if r.ok {
				done[r.i] = true
			}
		}
		for i := uint64(0); i < p; i++ {
			if !done[i] {
				t.Fatalf("processed index %d passed index %d, which no run finished", p, i)
			}
		}
		return p
	}

	kills := 0
	cutAt := map[uint64]int{} // index -> kills aimed at its runs
	next := time.Now().Add(300 * time.Millisecond)
	within, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for watch() < killJobs {
		if kills < 6 && time.Now().After(next) && last > 0 {
			// Kill a process that is inside a job: wait until one is. Not
			// one whose job was cut twice already: a job that kills
			// MaxCrashes workers goes to the dead set (and progress waits
			// for an operator), which is not what this test is about.
			l := live()
			var inJob []*child
			var jobs []uint64
			for _, r := range readRuns(t, l) {
				if !r.ok && !r.failed && cutAt[r.i] < 2 {
					inJob = append(inJob, l[r.proc])
					jobs = append(jobs, r.i)
				}
			}
			if len(inJob) > 0 {
				k := rand.IntN(len(inJob))
				victim := inJob[k]
				cutAt[jobs[k]]++
				victim.kill()
				kills++
				children = append(children, startChild(t, dir, b.ns, len(children)))
				next = time.Now().Add(time.Duration(250+rand.IntN(250)) * time.Millisecond)
			}
		}
		// The logs and the index are sampled, and the kills paced, on
		// wall time: the children run on their own.
		if redistest.Pause(within, 20*time.Millisecond) != nil {
			dumpKeys(t, b.pool, b.ns)
			t.Fatalf("timed out at processed index %d", last)
		}
	}
	if kills < 3 {
		t.Errorf("only %d kills before the end: the test did not test much", kills)
	}
	for _, ch := range children {
		ch.kill()
	}

	runs := readRuns(t, children)
	byIndex := map[uint64][]run{}
	for _, r := range runs {
		byIndex[r.i] = append(byIndex[r.i], r)
		if r.i >= r.processed+killAhead {
			t.Errorf("index %d started with processed index %d (MaxSearchAhead %d)", r.i, r.processed, killAhead)
		}
	}
	rerun, cut := 0, 0
	for i := uint64(0); i < killJobs; i++ {
		rs := byIndex[i]
		sort.Slice(rs, func(a, b int) bool { return rs[a].start < rs[b].start })
		var oks, fails, cuts int
		for k, r := range rs {
			if r.ok {
				oks++
			}
			if r.failed {
				fails++
			}
			if !r.ok && !r.failed {
				cut++
				cuts++
			}
			// A process that lost its keepalive (starved on a loaded
			// machine) is a zombie: its run may overlap the next one
			// (documented); only live processes are held to it.
			if k > 0 && r.start < rs[k-1].end && !r.zombie && !rs[k-1].zombie {
				t.Errorf("index %d ran twice at once: process %d from %d, process %d from %d to %d",
					i, r.proc, r.start, rs[k-1].proc, rs[k-1].start, rs[k-1].end)
			}
		}
		if oks == 0 {
			t.Errorf("index %d never finished", i)
		}
		if failsFirst(i) && fails == 0 && cuts == 0 { // a kill may cut the failing attempt
			t.Errorf("index %d: its failing first attempt is not in the logs", i)
		}
		rerun += len(rs) - 1 - fails
	}
	// At most MaxProcessing runs at any time, across processes.
	type edge struct {
		at int64
		d  int
	}
	var edges []edge
	zombies := map[int]bool{}
	for _, r := range runs {
		if r.zombie {
			zombies[r.proc] = true
			continue
		}
		edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
	}
	if len(zombies) > 0 {
		t.Logf("%d processes lost their keepalive (a loaded machine): their runs are left out of the overlap and MaxProcessing checks", len(zombies))
	}
	sort.Slice(edges, func(a, b int) bool {
		return edges[a].at < edges[b].at || edges[a].at == edges[b].at && edges[a].d < edges[b].d
	})
	now, top := 0, 0
	for _, e := range edges {
		now += e.d
		top = max(top, now)
	}
	if top > killMaxProc {
		t.Errorf("%d jobs ran at once, MaxProcessing is %d", top, killMaxProc)
	}
	p, err := c.Progress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Processed != killJobs || p.Next != killJobs || p.Finished != 0 {
		t.Errorf("progress %+v, want processed = next = %d", p, killJobs)
	}
	t.Logf("%d processes, %d kills, %d runs of %d jobs (%d cut by a kill, %d run again), at most %d at once",
		len(children), kills, len(runs), killJobs, cut, rerun, top)
	if cut == 0 {
		t.Errorf("no kill cut a run: the test did not test recovery")
	}
}

// dumpKeys logs every key of namespace ns with its contents (a failure's
// evidence).
func dumpKeys(t *testing.T, pool *redis.Pool, ns string) {
	c := pool.Get()
	defer c.Close()
	keys, _ := redis.Strings(c.Do("KEYS", ns+":*"))
	for _, k := range keys {
		typ, _ := redis.String(c.Do("TYPE", k))
		var v any
		switch typ {
		case "list":
			v, _ = redis.Strings(c.Do("LRANGE", k, 0, 20))
		case "hash":
			v, _ = redis.StringMap(c.Do("HGETALL", k))
		case "set":
			v, _ = redis.Strings(c.Do("SMEMBERS", k))
		case "zset":
			v, _ = redis.Strings(c.Do("ZRANGE", k, 0, 20, "WITHSCORES"))
		case "string":
			v, _ = redis.String(c.Do("GET", k))
		}
		if strings.Contains(k, ":t:") && typ == "hash" {
			m := v.(map[string]string)
			if m["s"] == "" {
				continue
			}
		}
		t.Logf("%s %s %v", typ, k, v)
	}
}

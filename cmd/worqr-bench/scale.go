package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// scaleMode runs the scale benchmark: the same drain workload on one Redis and
// on a Redis Cluster of -masters masters, from -procs worker processes serving
// -queues-per-master queues per master (their names chosen so that their hash
// tags spread evenly over the masters). It reports throughput, the Redis CPU
// (INFO cpu, user + sys) per job on each master, how the jobs and that CPU
// spread, and the worker processes' CPU per job, so that what one more master
// gives can be projected from per-master CPU per job when the clients are not
// the bound. To tell apart where a cluster's extra CPU per job goes, it also
// drains on a cluster of one master (-one-master, on by default), through a
// plain pool on that node (-one-master-plain-pool) and with plain pub/sub on
// the cluster (-plain-pubsub), and prints per setup the commands and script
// calls per job, the PUBLISH and SPUBLISH calls and the cluster bus messages
// of the drain.
//
//	go run ./cmd/worqr-bench scale                      # 200,000 jobs, 3 reps, 3 setups, about 2-3 minutes
//	go run ./cmd/worqr-bench scale -reps 3 -one-master-plain-pool -plain-pubsub
//	go run ./cmd/worqr-bench scale -n 100000 -reps 1 -procs 3
const scaleMode = "scale"

// scaleChildMode is the hidden first argument of a worker process of the
// scale benchmark: it builds its worker, prints "ready", starts it when it
// reads a line on stdin and prints "done <count> <unix nanos of the latest
// finish>" as finishes are accepted; it stops when stdin closes.
const scaleChildMode = "scale-worker"

type scaleOptions struct {
	n, masters, perMaster, procs, concurrency, reps, payload int
	oneMaster, oneMasterPlainPool, plainPubSub               bool
}

// scaleTopology is one Redis setup under test.
type scaleTopology struct {
	name    string
	masters []string          // addresses, in order
	queueOf map[string]string // queue -> master address
	args    []string          // how a worker process reaches Redis
	pool    worqr.ConnGetter
}

// scaleRun is one repetition on one topology.
type scaleRun struct {
	seconds   float64
	jobs      map[string]int     // per master
	redisCPU  map[string]float64 // per master, seconds
	clientCPU float64            // seconds, every worker process
	// What each master did during the drain (INFO commandstats, CLUSTER
	// INFO), to tell apart where the Redis CPU went.
	calls    map[string]int64 // commands, those run inside scripts included
	scripts  map[string]int64 // FCALL, EVALSHA and EVAL calls
	pubs     map[string]int64 // PUBLISH calls
	spubs    map[string]int64 // SPUBLISH calls
	busPub   map[string]int64 // cluster bus: publish messages sent
	busShard map[string]int64 // cluster bus: sharded publish messages sent
	busAll   map[string]int64 // cluster bus: every message sent (pings included)
}

// masterStats is what mastersStats reads of one master.
type masterStats struct {
	snap snapshot
	bus  map[string]int64 // CLUSTER INFO's cluster_stats_messages_*_sent
}

func runScale(args []string) int {
	o := scaleOptions{}
	fs := flag.NewFlagSet("worqr-bench "+scaleMode, flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 200000, "jobs per drain run")
	fs.IntVar(&o.masters, "masters", 3, "masters of the cluster (at least 3)")
	fs.IntVar(&o.perMaster, "queues-per-master", 2, "queues whose tag lands on each master (the one-Redis run serves the same queues)")
	fs.IntVar(&o.procs, "procs", 2, "worker processes")
	fs.IntVar(&o.concurrency, "concurrency", 20, "handler goroutines per queue in each worker process")
	fs.IntVar(&o.reps, "reps", 3, "repetitions; the table shows medians")
	fs.IntVar(&o.payload, "payload", 100, "payload size in bytes")
	fs.BoolVar(&o.oneMaster, "one-master", true, "also drain on a cluster of one master (cluster mode, one process)")
	fs.BoolVar(&o.oneMasterPlainPool, "one-master-plain-pool", false, "also drain on the one-master cluster through a plain pool (Redis in cluster mode, worqr not)")
	fs.BoolVar(&o.plainPubSub, "plain-pubsub", false, "also drain on the cluster with plain PUBLISH/SUBSCRIBE (as before sharded pub/sub)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.masters < 3 || o.perMaster < 1 || o.procs < 1 || o.concurrency < 1 || o.reps < 1 || o.n < 1 {
		fmt.Fprintln(os.Stderr, "worqr-bench scale: -masters >= 3 and positive -n, -queues-per-master, -procs, -concurrency, -reps")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := scale(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "worqr-bench scale:", err)
		return 1
	}
	return 0
}

func scale(ctx context.Context, o scaleOptions) error {
	cl, err := redistest.StartCluster(o.masters)
	if err != nil {
		return err
	}
	defer cl.Stop()
	cp, err := redisconn.NewCluster(cl.Addrs(), &redisconn.Options{MaxIdle: 64})
	if err != nil {
		return err
	}
	defer cp.Close()
	// Queue names whose tags land perMaster on each master.
	byMaster := map[string][]string{}
	queueOf := map[string]string{}
	var queues []string
	for i := 0; len(queues) < o.masters*o.perMaster && i < 10000; i++ {
		q := "s" + strconv.Itoa(i)
		node, err := cl.NodeOf(ctx, cluster.TagSlot(q))
		if err != nil {
			return err
		}
		if len(byMaster[node.Addr]) < o.perMaster {
			byMaster[node.Addr] = append(byMaster[node.Addr], q)
			queueOf[q] = node.Addr
			queues = append(queues, q)
		}
	}
	one, err := redistest.Start("--appendonly", "no") // a private server, even with WORQR_TEST_REDIS_URL
	if err != nil {
		return err
	}
	defer one.Stop()
	pool, err := redisconn.NewPool(one.URL, &redisconn.Options{MaxIdle: 64})
	if err != nil {
		return err
	}
	defer pool.Close()
	oneOf := map[string]string{}
	for _, q := range queues {
		oneOf[q] = one.Addr
	}
	tops := []*scaleTopology{
		{name: "1 Redis", masters: []string{one.Addr}, queueOf: oneOf, args: []string{"-redis-url", one.URL}, pool: pool}}
	if o.oneMaster {
		// The same one process in cluster mode (every slot on it): against
		// "1 Redis", what cluster mode costs; against the 3 masters, what
		// spreading the same work over more processes costs.
		solo, err := startSoloCluster(ctx)
		if err != nil {
			return err
		}
		defer solo.Stop()
		sp, err := redisconn.NewCluster([]string{solo.Addr}, &redisconn.Options{MaxIdle: 64})
		if err != nil {
			return err
		}
		defer sp.Close()
		soloOf := map[string]string{}
		for _, q := range queues {
			soloOf[q] = solo.Addr
		}
		tops = append(tops, &scaleTopology{name: "cluster, 1 master", masters: []string{solo.Addr}, queueOf: soloOf,
			args: []string{"-cluster", solo.Addr}, pool: sp})
		if o.oneMasterPlainPool {
			// The node serves every slot, so a pool that does not route
			// works: Redis runs in cluster mode, worqr as on one Redis (no
			// guard key, LPOP takes, plain pub/sub).
			pp, err := redisconn.NewPool(solo.URL, &redisconn.Options{MaxIdle: 64})
			if err != nil {
				return err
			}
			defer pp.Close()
			tops = append(tops, &scaleTopology{name: "cluster, 1 master, plain pool", masters: []string{solo.Addr}, queueOf: soloOf,
				args: []string{"-redis-url", solo.URL}, pool: pp})
		}
	}
	tops = append(tops,
		&scaleTopology{name: fmt.Sprintf("cluster, %d masters", o.masters), masters: cl.Addrs(), queueOf: queueOf,
			args: []string{"-cluster", strings.Join(cl.Addrs(), ",")}, pool: cp})
	if o.plainPubSub {
		tops = append(tops, &scaleTopology{name: fmt.Sprintf("cluster, %d masters, plain PUBLISH", o.masters), masters: cl.Addrs(),
			queueOf: queueOf, args: []string{"-cluster", strings.Join(cl.Addrs(), ","), "-plain-pubsub"}, pool: plainPubSub{cp}})
	}
	fmt.Printf("scale: %d jobs drained by %d worker processes, %d queues (%d per master of the cluster), concurrency %d per queue per process, %d-byte payloads, %d reps; GOMAXPROCS %d, %d CPUs\n",
		o.n, o.procs, len(queues), o.perMaster, o.concurrency, o.payload, o.reps, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Printf("registry tag {reg} (keepalives, reaper lease) on %s in the cluster; load average %s\n",
		mustNodeOf(ctx, cl, cluster.TagSlot("reg")), loadavg())
	defer func() { fmt.Printf("\nload average after: %s\n", loadavg()) }()
	results := map[string][]scaleRun{}
	for rep := 0; rep < o.reps; rep++ {
		for _, tp := range tops {
			r, err := scaleOnce(ctx, o, tp, queues)
			if err != nil {
				return fmt.Errorf("%s: %w", tp.name, err)
			}
			results[tp.name] = append(results[tp.name], r)
			fmt.Printf("  rep %d, %s: %.0f jobs/s\n", rep+1, tp.name, float64(o.n)/r.seconds)
		}
	}
	for _, tp := range tops {
		printScale(o, tp, results[tp.name])
	}
	return nil
}

// startSoloCluster starts a cluster-enabled redis-server that serves every
// slot alone (CLUSTER ADDSLOTSRANGE 0 16383) and waits for cluster_state:ok.
func startSoloCluster(ctx context.Context) (*redistest.Server, error) {
	s, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--appendonly", "no",
		"--cluster-announce-ip", "127.0.0.1") // a node that met no other does not know its address
	if err != nil {
		return nil, err
	}
	c, err := redis.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		s.Stop()
		return nil, err
	}
	defer c.Close()
	if _, err := redis.DoContext(c, ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383); err != nil {
		s.Stop()
		return nil, fmt.Errorf("one-master cluster: %w", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		info, err := redis.String(redis.DoContext(c, ctx, "CLUSTER", "INFO"))
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("one-master cluster not ok after 20 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustNodeOf(ctx context.Context, cl *redistest.Cluster, slot int) string {
	n, err := cl.NodeOf(ctx, slot)
	if err != nil {
		return "?"
	}
	return n.Addr
}

// scaleOnce pre-enqueues o.n jobs over queues (untimed), then times their
// drain by o.procs worker processes.
func scaleOnce(ctx context.Context, o scaleOptions, tp *scaleTopology, queues []string) (scaleRun, error) {
	r := scaleRun{jobs: map[string]int{}, redisCPU: map[string]float64{}, calls: map[string]int64{},
		scripts: map[string]int64{}, pubs: map[string]int64{}, spubs: map[string]int64{},
		busPub: map[string]int64{}, busShard: map[string]int64{}, busAll: map[string]int64{}}
	ns := "scale-" + xid.New().String()
	client, err := worqr.NewClient(tp.pool, &worqr.Config{Namespace: ns, Logger: newLogger()})
	if err != nil {
		return r, err
	}
	payload := makePayload(o.payload)
	for i, q := range queues {
		n := o.n / len(queues)
		if i < o.n%len(queues) {
			n++
		}
		r.jobs[tp.queueOf[q]] += n
		for left := n; left > 0; left -= batchSize {
			if _, err := client.EnqueueBatch(ctx, q, repeat(payload, min(left, batchSize)), nil); err != nil {
				return r, err
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
	}
	var children []child
	defer func() {
		for _, c := range children {
			c.stdin.Close()
			_ = c.cmd.Wait()
		}
	}()
	ready := make(chan struct{}, o.procs)
	counts := make([]atomic.Int64, o.procs)
	lasts := make([]atomic.Int64, o.procs)
	progress := make(chan struct{}, 1)
	for p := 0; p < o.procs; p++ {
		args := append([]string{scaleChildMode, "-namespace", ns, "-queues", strings.Join(queues, ","),
			"-concurrency", strconv.Itoa(o.concurrency)}, tp.args...)
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return r, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return r, err
		}
		if err := cmd.Start(); err != nil {
			return r, err
		}
		children = append(children, child{cmd, stdin})
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 1 && f[0] == "ready":
					ready <- struct{}{}
				case len(f) == 3 && f[0] == "done":
					n, _ := strconv.ParseInt(f[1], 10, 64)
					at, _ := strconv.ParseInt(f[2], 10, 64)
					counts[p].Store(n)
					lasts[p].Store(at)
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	for range o.procs {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			return r, fmt.Errorf("a worker process is not ready after 30 s")
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	before, err := mastersStats(ctx, tp.masters)
	if err != nil {
		return r, err
	}
	start := time.Now()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return r, err
		}
	}
	deadline := time.After(10 * time.Minute)
	for {
		var done int64
		for p := range counts {
			done += counts[p].Load()
		}
		if done >= int64(o.n) {
			break
		}
		select {
		case <-progress:
		case <-time.After(time.Second):
		case <-deadline:
			return r, fmt.Errorf("%d of %d jobs done after 10 minutes", done, o.n)
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	var last int64
	for p := range lasts {
		last = max(last, lasts[p].Load())
	}
	r.seconds = time.Unix(0, last).Sub(start).Seconds()
	after, err := mastersStats(ctx, tp.masters)
	if err != nil {
		return r, err
	}
	for _, m := range tp.masters {
		a, b := before[m], after[m]
		r.redisCPU[m] = b.snap.redisCPU - a.snap.redisCPU
		for name, d := range cmdDelta(a.snap, b.snap) {
			if strings.HasPrefix(name, "cluster") {
				continue // the bench's own CLUSTER INFO
			}
			r.calls[m] += d.Calls
			switch name {
			case "fcall", "evalsha", "eval":
				r.scripts[m] += d.Calls
			case "publish":
				r.pubs[m] += d.Calls
			case "spublish":
				r.spubs[m] += d.Calls
			}
		}
		r.busPub[m] = b.bus["publish"] - a.bus["publish"]
		r.busShard[m] = b.bus["publishshard"] - a.bus["publishshard"]
		r.busAll[m] = b.bus[""] - a.bus[""]
	}
	for _, c := range children {
		c.stdin.Close()
		if err := c.cmd.Wait(); err != nil {
			return r, fmt.Errorf("worker process: %w", err)
		}
		r.clientCPU += (c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()).Seconds()
	}
	children = nil
	return r, nil
}

// mastersStats reads of each master its CPU (used_cpu_user + used_cpu_sys)
// and command counters (INFO), and, on a cluster node, the messages it sent
// over the cluster bus (CLUSTER INFO: "" is cluster_stats_messages_sent,
// the others cluster_stats_messages_<type>_sent).
func mastersStats(ctx context.Context, masters []string) (map[string]masterStats, error) {
	out := map[string]masterStats{}
	for _, m := range masters {
		c, err := redis.DialContext(ctx, "tcp", m)
		if err != nil {
			return nil, err
		}
		snap, err := takeSnapshot(ctx, c)
		if err != nil {
			c.Close()
			return nil, err
		}
		ms := masterStats{snap: snap, bus: map[string]int64{}}
		if info, err := redis.String(redis.DoContext(c, ctx, "CLUSTER", "INFO")); err == nil {
			for k, v := range parseInfo(info) {
				typ, ok := strings.CutPrefix(k, "cluster_stats_messages_")
				if !ok {
					continue
				}
				if typ, ok = strings.CutSuffix(typ, "sent"); !ok {
					continue
				}
				n, _ := strconv.ParseInt(v, 10, 64)
				ms.bus[strings.TrimSuffix(typ, "_")] = n
			}
		} // a server without cluster mode: no bus
		c.Close()
		out[m] = ms
	}
	return out, nil
}

func printScale(o scaleOptions, tp *scaleTopology, runs []scaleRun) {
	var tput, client, clientBusy, redisAll []float64
	perJob := map[string][]float64{}
	busy := map[string][]float64{}
	share := map[string][]float64{}
	for _, r := range runs {
		tput = append(tput, float64(o.n)/r.seconds)
		client = append(client, r.clientCPU/float64(o.n)*1e6)
		clientBusy = append(clientBusy, r.clientCPU/r.seconds)
		var sum float64
		for _, m := range tp.masters {
			sum += r.redisCPU[m]
		}
		for _, m := range tp.masters {
			perJob[m] = append(perJob[m], r.redisCPU[m]/float64(max(r.jobs[m], 1))*1e6)
			busy[m] = append(busy[m], r.redisCPU[m]/r.seconds*100)
			share[m] = append(share[m], 100*r.redisCPU[m]/max(sum, 1e-9))
		}
		redisAll = append(redisAll, sum/float64(o.n)*1e6)
	}
	fmt.Printf("\n%s: %.0f jobs/s (median of %d; runs: %s)\n", tp.name, median(tput), len(runs), joinf(tput, "%.0f"))
	fmt.Printf("  Redis CPU per job, all masters: %.1f µs; worker processes' CPU per job: %.1f µs (%.2f cores busy)\n",
		median(redisAll), median(client), median(clientBusy))
	r := runs[0]
	fmt.Printf("  %-18s %8s %7s %12s %10s %9s\n", "master", "jobs", "share", "CPU µs/job", "CPU share", "busy")
	for _, m := range tp.masters {
		fmt.Printf("  %-18s %8d %6.1f%% %12.1f %9.1f%% %8.0f%%\n", m, r.jobs[m], 100*float64(r.jobs[m])/float64(o.n),
			median(perJob[m]), median(share[m]), median(busy[m]))
	}
	maxMaster := 0.0
	for _, m := range tp.masters {
		maxMaster = max(maxMaster, median(perJob[m])*float64(r.jobs[m])/float64(o.n))
	}
	// A master is one thread: it saturates at 1 s of CPU per second. The
	// busiest master bounds the cluster when the clients keep up.
	// What the masters did for that CPU: commands (those inside scripts
	// included) and script calls per job, pub/sub, the cluster bus.
	var calls, scripts, pubs, spubs, busPub, busShard, busAll []float64
	for _, r := range runs {
		var c, sc, p, sp, bp, bs, ba float64
		for _, m := range tp.masters {
			c += float64(r.calls[m])
			sc += float64(r.scripts[m])
			p += float64(r.pubs[m])
			sp += float64(r.spubs[m])
			bp += float64(r.busPub[m])
			bs += float64(r.busShard[m])
			ba += float64(r.busAll[m])
		}
		n := float64(o.n)
		calls, scripts = append(calls, c/n), append(scripts, sc/n)
		pubs, spubs = append(pubs, p), append(spubs, sp)
		busPub, busShard, busAll = append(busPub, bp), append(busShard, bs), append(busAll, ba/r.seconds)
	}
	fmt.Printf("  per job, all masters: %.2f commands (those inside scripts included), %.3f script calls\n",
		median(calls), median(scripts))
	fmt.Printf("  during the drain: %.0f PUBLISH and %.0f SPUBLISH calls; cluster bus: %.0f publish and %.0f sharded publish messages sent, %.0f messages/s in all\n",
		median(pubs), median(spubs), median(busPub), median(busShard), median(busAll))
	fmt.Printf("  projection, clients not the bound: the busiest master saturates at about %.0f jobs/s of this mix "+
		"(1 s of CPU per second / %.1f µs of its CPU per job of the whole); the clients then need about %.1f cores\n",
		1e6/maxMaster, maxMaster, 1e6/maxMaster*median(client)/1e6)
}

func joinf(xs []float64, f string) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf(f, x))
	}
	return strings.Join(s, ", ")
}

// plainPubSub hides a ClusterPool's sharded pub/sub: a store on it routes
// each call by tag but publishes with PUBLISH, which a cluster broadcasts
// to every node, and listens with SUBSCRIBE: what sharded pub/sub saves.
type plainPubSub struct{ cp *redisconn.Cluster }

func (p plainPubSub) GetContext(ctx context.Context) (redis.Conn, error) { return p.cp.GetContext(ctx) }

func (p plainPubSub) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	return p.cp.GetContextForTag(ctx, tag)
}

func runScaleChild(args []string) int {
	fs := flag.NewFlagSet(scaleChildMode, flag.ContinueOnError)
	url := fs.String("redis-url", "", "Redis URL")
	seeds := fs.String("cluster", "", "cluster seeds, comma-separated")
	ns := fs.String("namespace", "", "worqr namespace")
	queues := fs.String("queues", "", "queues to serve, comma-separated")
	concurrency := fs.Int("concurrency", 1, "handler goroutines per queue")
	plain := fs.Bool("plain-pubsub", false, "publish and subscribe with plain pub/sub on a cluster")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	names := strings.Split(*queues, ",")
	po := &redisconn.Options{MaxIdle: 2 * *concurrency * len(names)}
	var pool worqr.ConnGetter
	if *seeds != "" {
		cp, err := redisconn.NewCluster(strings.Split(*seeds, ","), po)
		if err != nil {
			fmt.Fprintln(os.Stderr, scaleChildMode+":", err)
			return 1
		}
		defer cp.Close()
		pool = cp
		if *plain {
			pool = plainPubSub{cp}
		}
	} else {
		p, err := redisconn.NewPool(*url, po)
		if err != nil {
			fmt.Fprintln(os.Stderr, scaleChildMode+":", err)
			return 1
		}
		defer p.Close()
		pool = p
	}
	var count, last atomic.Int64
	cfg := &worqr.WorkerConfig{Config: worqr.Config{Namespace: *ns, Logger: newLogger()}, Queues: map[string]worqr.QueueConfig{},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDone {
				last.Store(time.Now().UnixNano())
				count.Add(1)
			}
		}}
	for _, q := range names {
		cfg.Queues[q] = worqr.QueueConfig{Concurrency: *concurrency, Handler: noop}
	}
	w, err := worqr.NewWorker(pool, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, scaleChildMode+":", err)
		return 1
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 0 // the bench is gone
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, scaleChildMode+":", err)
		return 1
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reportDone(ctx, &count, &last)
	}()
	_, _ = io.Copy(io.Discard, in)
	stop()
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Stop(sctx)
	return 0
}

// loadavg returns the 1, 5 and 15-minute load averages ("?" off Linux).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// reportDone prints "done <count> <last>" (tasks done, the time of the last
// in Unix ns) every 2 ms when count changed, until ctx ends.
func reportDone(ctx context.Context, count, last *atomic.Int64) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c := count.Load(); c != sent {
			sent = c
			fmt.Printf("done %d %d\n", c, last.Load())
		}
	}
}

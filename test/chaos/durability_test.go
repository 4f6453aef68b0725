package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// lossRound is one SIGKILL of redis-server under continuous enqueueing.
type lossRound struct {
	acked   int
	missing int
	span    time.Duration // kill time minus the ack of the oldest missing task
	lastAck time.Duration // kill time minus the last ack before it
}

// lossServer is a redis-server that measureLoss can crash and restart.
type lossServer interface {
	url() string
	crash()         // SIGKILL
	restart() error // start again from the data directory
	stop()
}

// processServer is a redistest server: a SIGKILL loses what the process
// held, not what the kernel held.
type processServer struct{ *redistest.Server }

func (s processServer) url() string    { return s.URL }
func (s processServer) crash()         { s.Kill() }
func (s processServer) restart() error { return s.Restart() }
func (s processServer) stop()          { s.Stop() }

// measureLoss enqueues continuously with writers goroutines, crashes the
// server mid-stream, restarts it from its AOF and counts the acknowledged
// enqueues that are gone, rounds times.
func measureLoss(t *testing.T, srv lossServer, rounds, writers int, pace time.Duration) []lossRound {
	t.Helper()
	defer srv.stop()
	ctx, cancel := context.WithCancel(context.Background()) // the pauses end with the test
	defer cancel()
	pool := &redis.Pool{
		MaxIdle: writers,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, srv.url(), redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
		},
		TestOnBorrow: func(c redis.Conn, _ time.Time) error { return c.Err() },
	}
	defer pool.Close()
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: "loss"})
	if err != nil {
		t.Fatal(err)
	}
	var out []lossRound
	for round := 0; round < rounds; round++ {
		queue := fmt.Sprintf("loss%d", round)
		type ack struct {
			id string
			at time.Time
		}
		var (
			mu    sync.Mutex
			acks  []ack
			wg    sync.WaitGroup
			ready = make(chan struct{}, writers)
		)
		wctx, stop := context.WithCancel(ctx)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true
				for wctx.Err() == nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					id, err := client.Enqueue(ctx, queue, []byte("x"), nil)
					cancel()
					if err != nil {
						continue // the kill: nothing recorded
					}
					now := time.Now()
					mu.Lock()
					acks = append(acks, ack{id, now})
					mu.Unlock()
					if first {
						first = false
						ready <- struct{}{}
					}
					if pace > 0 {
						_ = redistest.Pause(wctx, pace)
					}
				}
			}()
		}
		for w := 0; w < writers; w++ {
			<-ready
		}
		_ = redistest.Pause(ctx, between(1500*time.Millisecond, 2500*time.Millisecond)) // enqueueing when the crash comes
		killAt := time.Now()
		srv.crash()
		stop()
		wg.Wait()
		if err := srv.restart(); err != nil {
			t.Fatalf("restarting redis-server from its AOF: %v", err)
		}
		// A fresh connection: the pool's idle ones died with the server.
		conn, err := redis.DialURL(srv.url(), redis.DialReadTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		kept, err := redis.Strings(conn.Do("LRANGE", "loss:{"+queue+"}:q:"+queue, 0, -1))
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		have := make(map[string]bool, len(kept))
		for _, id := range kept {
			have[id] = true
		}
		r := lossRound{acked: len(acks)}
		var last time.Time
		for _, a := range acks {
			if a.at.After(last) && !a.at.After(killAt) {
				last = a.at
			}
			if have[a.id] {
				continue
			}
			r.missing++
			if d := killAt.Sub(a.at); d > r.span {
				r.span = d
			}
		}
		r.lastAck = killAt.Sub(last)
		out = append(out, r)
		_ = redistest.Pause(ctx, time.Duration(rand.IntN(200))*time.Millisecond)
	}
	return out
}

func lossSummary(what string, rs []lossRound) string {
	acked, missing := 0, 0
	var span time.Duration
	var parts []string
	for _, r := range rs {
		acked += r.acked
		missing += r.missing
		span = max(span, r.span)
		parts = append(parts, fmt.Sprintf("%d/%d (%s)", r.missing, r.acked, r.span.Round(time.Millisecond)))
	}
	s := fmt.Sprintf("%s: %d crashes under continuous enqueueing: %d of %d acknowledged enqueues lost", what, len(rs), missing, acked)
	if missing > 0 {
		s += fmt.Sprintf(", acknowledged at most %s before the crash", span.Round(time.Millisecond))
	}
	return s + "; per crash lost/acked (oldest lost): " + strings.Join(parts, ", ")
}

// TestChaosDurability measures what a crash of redis-server loses with AOF
// persistence, under continuous enqueueing:
//   - a SIGKILL of the process, with appendfsync always and everysec: Redis
//     write(2)s the AOF before it replies, so the kernel holds every
//     acknowledged write and nothing is lost (unless Redis postponed the
//     write behind a slow fsync, which everysec allows for up to 2s);
//   - a simulated power loss (the kernel's unsynced data gone too, see
//     powerLossShim), with always (nothing lost: the control) and everysec
//     (the last second or so, which is what "everysec loses at most the last
//     second" is about).
func TestChaosDurability(t *testing.T) {
	needMode(t, "short", "long")
	t.Parallel()
	// Short: paced writers (about a thousand enqueues a second each), to
	// spare the CPU of a shared test run; long: as fast as they go.
	rounds, writers, pace := 2, 2, time.Millisecond
	if cfg.mode == "long" {
		rounds, writers, pace = 10, 4, 0
	}
	start := func(fsync string) lossServer {
		// No automatic AOF rewrite: its forked child would outlive a SIGKILL of
		// the server for a while, holding the port the restart needs.
		args := []string{"--save", "", "--appendonly", "yes", "--appendfsync", fsync, "--auto-aof-rewrite-percentage", "0"}
		s, err := redistest.Start(args...)
		for i := 0; err != nil && i < 3 && !strings.Contains(err.Error(), "not found"); i++ {
			t.Logf("starting redis-server failed, trying again: %v", err) // a port taken between pick and bind
			s, err = redistest.Start(args...)
		}
		if err != nil {
			t.Fatal(err)
		}
		return processServer{s}
	}
	lines := []string{}
	results := map[string][]lossRound{}
	for _, fsync := range []string{"always", "everysec"} {
		rs := measureLoss(t, start(fsync), rounds, writers, pace)
		results["kill "+fsync] = rs
		lines = append(lines, lossSummary("SIGKILL, appendfsync "+fsync, rs))
	}
	shimDir := t.TempDir()
	shim, err := buildPowerLossShim(shimDir)
	if err != nil {
		lines = append(lines, "simulated power loss: not measured: "+err.Error())
	} else {
		for _, fsync := range []string{"always", "everysec"} {
			s, err := startShimmedRedis(shim, fsync)
			if err != nil {
				t.Fatal(err)
			}
			rs := measureLoss(t, s, rounds, writers, pace)
			results["power "+fsync] = rs
			lines = append(lines, lossSummary("simulated power loss, appendfsync "+fsync, rs))
		}
	}
	publish(t, "=== chaos durability\n  "+strings.Join(lines, "\n  ")+"\n")
	for _, k := range []string{"kill always", "power always", "kill everysec"} {
		for _, r := range results[k] {
			if r.missing > 0 && (k != "kill everysec" || r.span > 2*time.Second) {
				t.Errorf("%s: lost %d of %d acknowledged enqueues (oldest %s before the crash)", k, r.missing, r.acked, r.span)
			}
		}
	}
	for _, r := range results["power everysec"] {
		if r.span > 2*time.Second {
			t.Errorf("power loss with appendfsync everysec lost acknowledged enqueues from %s before the crash (Redis's worst case is 2s)", r.span)
		}
	}
}

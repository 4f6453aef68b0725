package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// faults runs fault loops until ctx ends; wait waits for them.
type faults struct {
	wg sync.WaitGroup
}

func (f *faults) run(ctx context.Context, loop func(ctx context.Context)) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		loop(ctx)
	}()
}

func (f *faults) wait() { f.wg.Wait() }

// killer SIGKILLs a random worker every lo..hi (run a keeper with it).
func (c *cluster) killer(lo, hi time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		for redistest.Pause(ctx, between(lo, hi)) == nil {
			live := c.live(false)
			if len(live) == 0 {
				continue
			}
			c.kill(live[rand.IntN(len(live))]) // the keeper starts a new one
		}
	}
}

// freezer SIGSTOPs a random worker past its keepalive TTL (a zombie), then
// SIGCONTs it, every lo..hi.
func (c *cluster) freezer(lo, hi time.Duration) func(context.Context) {
	ttl := c.opts.timings.ttl
	return func(ctx context.Context) {
		for redistest.Pause(ctx, between(lo, hi)) == nil {
			live := c.live(false)
			if len(live) < 2 {
				continue // keep one worker thawed
			}
			c.freeze(live[rand.IntN(len(live))], ttl+between(ttl/4, ttl))
		}
	}
}

// keeper keeps n workers running (replacing those that could not start).
func (c *cluster) keeper(n int) func(context.Context) {
	return func(ctx context.Context) { c.keepWorkers(ctx, n) }
}

// network cuts every connection every lo..hi, changes the latency, and now
// and then refuses connections for a moment.
func (c *cluster) network(lo, hi, maxLatency, refuse time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		for redistest.Pause(ctx, between(lo, hi)) == nil {
			switch rand.IntN(4) {
			case 0:
				c.proxy.SetLatency(0, 0)
			case 1:
				c.proxy.SetLatency(0, maxLatency/4)
			default:
				c.proxy.SetLatency(maxLatency/4, maxLatency)
			}
			c.fault("latency_change")
			if rand.IntN(4) == 0 && refuse > 0 {
				c.redisMu.Lock()
				c.fault("refuse_period")
				from := time.Now()
				c.proxy.Refuse(true)
				c.proxy.Cut()
				_ = redistest.Pause(ctx, between(refuse/2, refuse))
				c.proxy.Refuse(false)
				c.down(from)
				c.redisMu.Unlock()
				continue
			}
			c.fault("cut_all")
			c.proxy.Cut()
		}
		c.proxy.SetLatency(0, 0)
	}
}

// redisFaults makes Redis itself fail every lo..hi, in turn: a restart
// (SIGKILL, then start from the AOF), unreachable behind the proxy for
// outage, redis-server SIGSTOPped for outage.
func (c *cluster) redisFaults(lo, hi, outage time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		for i := 0; redistest.Pause(ctx, between(lo, hi)) == nil; i++ {
			switch i % 3 {
			case 0:
				if err := c.restartRedis(); err != nil {
					c.t.Errorf("restarting redis-server: %v", err)
					return
				}
			case 1:
				c.refuseRedis(outage)
			case 2:
				if err := c.freezeRedis(outage); err != nil {
					c.t.Errorf("freezing redis-server: %v", err)
				}
			}
		}
	}
}

// redisPID finds the pid of the cluster's redis-server by its data directory.
func (c *cluster) redisPID() (int, error) {
	return findRedisPID(c.srv.Dir)
}

func findRedisPID(dir string) (int, error) {
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), "redis-server") {
			continue
		}
		// redis-server rewrites its title but runs in its --dir.
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == want {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no redis-server running in %s", dir)
}

// restartRedis kills redis-server (SIGKILL) and starts it again on the same
// port and data directory. While it is down, a new outgoing connection may be
// given its port (redistest picks ports in the ephemeral range): then it
// retries for a while, until that connection is gone.
func (c *cluster) restartRedis() error {
	c.redisMu.Lock()
	defer c.redisMu.Unlock()
	c.fault("redis_restart")
	defer c.down(time.Now())
	err := c.srv.Restart()
	for i := 0; err != nil && strings.Contains(err.Error(), "Address already in use") && i < 50; i++ {
		c.fault("redis_restart_port_busy")
		if redistest.Pause(c.ctx, 200*time.Millisecond) != nil {
			break
		}
		err = c.srv.Restart()
	}
	return err
}

// freezeRedis SIGSTOPs redis-server for d: connections hang, nothing answers.
func (c *cluster) freezeRedis(d time.Duration) error {
	c.redisMu.Lock()
	defer c.redisMu.Unlock()
	pid, err := c.redisPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	c.fault("redis_frozen")
	defer c.down(time.Now())
	_ = redistest.Pause(c.ctx, d) // held for d, or until the test ends
	return syscall.Kill(pid, syscall.SIGCONT)
}

// refuseRedis makes the proxy cut every connection and refuse new ones for d.
func (c *cluster) refuseRedis(d time.Duration) {
	c.redisMu.Lock()
	defer c.redisMu.Unlock()
	c.fault("redis_unreachable")
	defer c.down(time.Now())
	c.proxy.Refuse(true)
	c.proxy.Cut()
	_ = redistest.Pause(c.ctx, d) // held for d, or until the test ends
	c.proxy.Refuse(false)
}

// --- CPU ---

// cpuTicks returns a process's user+system CPU time in clock ticks (1/100 s
// on Linux).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// After the command: state(3) ... utime is field 14, stime 15 (1-based
	// over the whole line), so 11 and 12 here.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad /proc stat numbers")
	}
	return u + st, nil
}

const clockTicks = 100 // USER_HZ on Linux

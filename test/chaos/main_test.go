// Package chaos_test is worqr's chaos suite: real worker processes
// (cmd/worqr-example worker) on a real redis-server, killed, frozen, cut off
// and starved of Redis, and checked from the outside: no task lost, none
// accepted twice, nothing left over, and how long recovery takes.
// TestChaosOrdered's, TestChaosFair's and TestChaosTimers' workers are this
// test binary, re-executed with WORQR_CHAOS_ORDERED_LOG,
// WORQR_CHAOS_FAIR_LOG or WORQR_CHAOS_TIMERS_LOG set (see orderedChild,
// fairChild, timersChild).
//
// WORQR_CHAOS (or -chaos.mode) picks the run:
//
//	short  (default) each scenario for a few seconds; part of `make test`
//	long   the 10-minute mixed-fault run of `make chaos`, the fair
//	       queue's and the flow timers' runs as long, plus the everysec
//	       loss measurement
//	off    skip the suite
//
// WORQR_CHAOS_DURATION and WORQR_CHAOS_TASKS (or -chaos.duration,
// -chaos.tasks) set the long run's length and task count (10m, 100000).
// WORQR_CHAOS_RACE=1 builds the worker binary with -race; WORQR_CHAOS_BIN
// uses a binary built beforehand instead. WORQR_CHAOS_REPORT
// names a file the figures are appended to. See docs/RELIABILITY.md.
package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

var (
	flagMode     = flag.String("chaos.mode", "", "short, long or off (default $WORQR_CHAOS, else short)")
	flagDuration = flag.Duration("chaos.duration", 0, "length of the long mixed run (default $WORQR_CHAOS_DURATION, else 10m)")
	flagTasks    = flag.Int("chaos.tasks", 0, "tasks of the long mixed run (default $WORQR_CHAOS_TASKS, else 100000)")
)

// settings is what the run was asked to do.
type settings struct {
	mode     string
	duration time.Duration // long mixed run
	tasks    int           // long mixed run
	race     bool
	report   string
	payload  int // bytes of each task's payload (default 5)
}

var (
	cfg       settings
	workerBin string // the built cmd/worqr-example
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(orderedChildEnv) != "" {
		os.Exit(orderedChild()) // a worker process of TestChaosOrdered
	}
	if os.Getenv(fairChildEnv) != "" {
		os.Exit(fairChild()) // a worker process of TestChaosFair
	}
	if os.Getenv(timersChildEnv) != "" {
		os.Exit(timersChild()) // a worker process of TestChaosTimers
	}
	var err error
	cfg, err = readSettings()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	// The scenarios mostly wait (for faults, for recovery), using little
	// CPU: run four at a time unless told otherwise.
	if f := flag.Lookup("test.parallel"); f != nil && !flagGiven("test.parallel") {
		_ = f.Value.Set("4")
	}
	if cfg.mode == "off" {
		os.Exit(m.Run()) // every test skips
	}
	if bin := os.Getenv("WORQR_CHAOS_BIN"); bin != "" {
		workerBin = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "worqr-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	workerBin, err = buildWorker(dir, cfg.race)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "chaos: building cmd/worqr-example:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func readSettings() (settings, error) {
	s := settings{mode: *flagMode, duration: *flagDuration, tasks: *flagTasks}
	if s.mode == "" {
		s.mode = os.Getenv("WORQR_CHAOS")
	}
	if s.mode == "" {
		s.mode = "short"
	}
	switch s.mode {
	case "short", "long", "off":
	default:
		return s, fmt.Errorf("WORQR_CHAOS=%q: want short, long or off", s.mode)
	}
	if s.duration == 0 {
		s.duration = 10 * time.Minute
		if v := os.Getenv("WORQR_CHAOS_DURATION"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return s, fmt.Errorf("WORQR_CHAOS_DURATION=%q: want a positive duration such as 10m", v)
			}
			s.duration = d
		}
	}
	if s.tasks == 0 {
		s.tasks = 100000
		if v := os.Getenv("WORQR_CHAOS_TASKS"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return s, fmt.Errorf("WORQR_CHAOS_TASKS=%q: want a positive number", v)
			}
			s.tasks = n
		}
	}
	s.payload = 5
	if v := os.Getenv("WORQR_CHAOS_PAYLOAD"); v != "" {
		// Big payloads make takes stop at their byte bound and give tasks
		// back, under the same faults.
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 4<<20 {
			return s, fmt.Errorf("WORQR_CHAOS_PAYLOAD=%q: want a number of bytes from 1 to 4194304", v)
		}
		s.payload = n
	}
	s.race = os.Getenv("WORQR_CHAOS_RACE") == "1"
	s.report = os.Getenv("WORQR_CHAOS_REPORT")
	return s, nil
}

// buildWorker builds cmd/worqr-example into dir, with the go build
// -overlay file WORQR_EXAMPLE_OVERLAY names when it is set
// (contrib/goredis/suite sets it: the workers then run on go-redis).
func buildWorker(dir string, race bool) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "worqr-example")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if ov := os.Getenv("WORQR_EXAMPLE_OVERLAY"); ov != "" {
		args = append(args, "-overlay", ov)
	}
	args = append(args, "github.com/worqr/worqr-go/cmd/worqr-example")
	cmd := exec.Command(goTool, args...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return bin, nil
}

// needMode skips the test unless the run's mode is one of modes.
func needMode(t *testing.T, modes ...string) {
	t.Helper()
	for _, m := range modes {
		if cfg.mode == m {
			return
		}
	}
	t.Skipf("chaos mode is %s (WORQR_CHAOS); this test runs in %v", cfg.mode, modes)
}

// flagGiven says whether flag name was set on the command line.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

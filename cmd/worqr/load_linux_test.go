package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/worqr/worqr-go/internal/redistest"
)

// openPTY returns the two ends of a new pseudo-terminal: what the child
// writes to tty, the test reads from ptm.
func openPTY(t *testing.T) (ptm, tty *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal (/dev/ptmx): %v", err)
	}
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 160}); err != nil {
		t.Fatal(err)
	}
	return ptm, tty
}

// A load interrupted on a terminal leaves a line that says where it
// stopped, not a full bar: the bar was filled to 100% on every end.
func TestLoadBarIsHonestWhenInterrupted(t *testing.T) {
	b := setup(t)
	var input bytes.Buffer
	for i := 1; i <= 50_000; i++ {
		fmt.Fprintf(&input, "{\"n\":%d}\n", i)
	}
	file := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(file, input.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ptm, tty := openPTY(t)
	defer ptm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// --max-waiting and no worker: the load stalls after about 1,000
	// tasks, until interrupted.
	cmd := exec.CommandContext(ctx, binPath, "load", file, "--queue", "ld", "--chunk", "100", "--window", "1", "--max-waiting", "1000")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns)
	cmd.Stderr = tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child holds it now
	var (
		mu     sync.Mutex
		screen bytes.Buffer
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return // EIO once the child has exited
			}
		}
	}()
	redistest.WaitFor(b.t, patience, "the load to stall, waiting for workers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(screen.String(), "waiting for workers")
	})
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	<-read
	mu.Lock()
	out := screen.String()
	mu.Unlock()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitFail {
		t.Errorf("interrupted load: %v, want exit 1\n%q", err, out)
	}
	if strings.Contains(out, "100%") {
		t.Errorf("the terminal shows a full bar after an interrupted load:\n%q", out)
	}
	m := regexp.MustCompile(`stopped at ([0-9.]+)% of the input \([0-9.]+ kB of [0-9.]+ kB\): (\d+) enqueued of (\d+) lines read`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no line says where the load stopped:\n%q", out)
	}
	if pct, _ := strconv.ParseFloat(m[1], 64); pct <= 0 || pct >= 50 {
		t.Errorf("stopped at %s%% of the input; want the little it read before stalling", m[1])
	}
	if n, _ := strconv.Atoi(m[2]); int64(n) != b.queue("ld").Waiting {
		t.Errorf("the line says %s enqueued; the queue holds %d", m[2], b.queue("ld").Waiting)
	}
	if !strings.Contains(out, "interrupted after") {
		t.Errorf("no interruption message:\n%q", out)
	}
}

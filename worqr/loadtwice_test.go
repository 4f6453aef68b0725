package worqr_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// gated blocks its first Read until both loaders have read their
// checkpoint (neither finds one), so that they run at once.
type gated struct {
	r    io.Reader
	wg   *sync.WaitGroup
	once sync.Once
}

func (g *gated) Read(p []byte) (int, error) {
	g.once.Do(func() { g.wg.Done(); g.wg.Wait() })
	return g.r.Read(p)
}

// Two loads under one name at once: each line is enqueued once (the
// checkpoint sees to that), and a load that finds chunks it never lost
// applied by the other stops, saying so. Before, each counted the other's
// chunks as its own: both reported every line enqueued, and the history
// said twice as many tasks as the queue held (found by an audit).
func TestTwoLoadersOfOneName(t *testing.T) {
	ctx := context.Background()
	_, _, c, in := freshNamespace(t)
	var buf bytes.Buffer
	const n = 3000
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&buf, "line-%d\n", i)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	var res [2]worqr.LoadProgress
	var errs [2]error
	var done sync.WaitGroup
	for k := 0; k < 2; k++ {
		done.Add(1)
		go func(k int) {
			defer done.Done()
			res[k], errs[k] = c.Load(ctx, "ld2", &gated{r: bytes.NewReader(buf.Bytes()), wg: &wg},
				&worqr.LoadOptions{Name: "same", Chunk: 10, Window: 2})
		}(k)
	}
	done.Wait()
	l := queueLen(t, in, "ld2")
	c.Flush() // waits for the publication
	h := waitHistory(t, in, "ld2", func(h worqr.Throughput) bool { return h.Enqueued >= int64(l) })
	if errs[0] == nil && errs[1] == nil {
		t.Errorf("two loads of one name ran at once and neither was refused")
	}
	if got := res[0].Enqueued + res[1].Enqueued; got != int64(l) {
		t.Errorf("the loads report %d + %d = %d tasks enqueued (errors %v, %v); the queue holds %d", res[0].Enqueued, res[1].Enqueued, got, errs[0], errs[1], l)
	}
	if h.Enqueued != int64(l) {
		t.Errorf("history: %d enqueued, the queue holds %d", h.Enqueued, l)
	}
	t.Logf("queue %d of %d lines; errors: %v / %v", l, n, errs[0], errs[1])
}

// Load refuses a line over Config.MaxPayloadBytes as any bad line: it
// enforced the limit only through the scanner's buffer (at least 64 KiB,
// and MaxPayloadBytes+2 above that), and enqueued such lines (found by an
// audit).
func TestLoadLineOverMaxPayloadBytes(t *testing.T) {
	ctx := context.Background()
	pool, ns, _, _ := freshNamespace(t)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, MaxPayloadBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "big", bytes.Repeat([]byte("x"), 101), nil); err == nil {
		t.Fatal("Enqueue accepted 101 bytes")
	}
	for _, size := range []int{101, 1000} {
		in := "ok\n" + string(bytes.Repeat([]byte("x"), size)) + "\n"
		p, err := c.Load(ctx, "big", bytes.NewReader([]byte(in)), &worqr.LoadOptions{Name: fmt.Sprintf("l%d", size)})
		if err == nil {
			t.Errorf("Load accepted a line of %d bytes with MaxPayloadBytes 100 (%d enqueued)", size, p.Enqueued)
		}
	}
}

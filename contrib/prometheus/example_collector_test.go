package prometheus_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	worqrprom "github.com/worqr/worqr-go/contrib/prometheus"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// At each scrape a Collector reads the namespace's queues and workers
// through an Inspector; Run adds counters and histograms from the live
// events of every process.
func ExampleNewCollector() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-collector"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if _, err := client.EnqueueBatch(ctx, "emails", [][]byte{[]byte("a"), []byte("b")}, nil); err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "emails", []byte("c"), &worqr.EnqueueOpts{Delay: time.Hour}); err != nil {
		panic(err)
	}

	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	c := worqrprom.NewCollector(in, nil)
	go c.Run(ctx) // the event-driven metrics, until ctx ends
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(worqrprom.Handler(reg)) // or http.Handle("/metrics", ...)
	defer srv.Close()

	res, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() {
		for _, name := range []string{"worqr_queue_waiting{", "worqr_queue_scheduled{", "worqr_up "} {
			if strings.HasPrefix(lines.Text(), name) {
				fmt.Println(lines.Text())
			}
		}
	}
	// Output:
	// worqr_queue_scheduled{queue="emails"} 1
	// worqr_queue_waiting{queue="emails"} 2
	// worqr_up 1
}

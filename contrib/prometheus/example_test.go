package prometheus_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	worqrprom "github.com/worqr/worqr-go/contrib/prometheus"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// Serve the metrics of the namespace "example" at /metrics.
func Example() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: "example"})
	if err != nil {
		log.Fatal(err)
	}

	c := worqrprom.NewCollector(in, nil)
	go c.Run(ctx) // counters and histograms from the live events

	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	http.Handle("/metrics", worqrprom.Handler(reg))
	log.Fatal(http.ListenAndServe("127.0.0.1:9090", nil))
}

package prometheus

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the metrics of g (a *prometheus.Registry, say) in the
// Prometheus text and OpenMetrics formats, for mounting at /metrics. A
// metric that fails to gather is logged and left out rather than failing
// the whole response (a Collector never fails: it reports worqr_up 0).
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

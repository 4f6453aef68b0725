package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"context"
	"errors"
	"fmt"
	worqrprom "github.com/worqr/worqr-go/contrib/prometheus"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/dash"
)

const (
	envDashUser     = "WORQR_DASH_USER"
	envDashPassword = "WORQR_DASH_PASSWORD"
)

func (a *app) dashCmd() *cobra.Command {
	var (
		addr, prefix, user, password string
		readOnly                     bool
	)
	cmd := &cobra.Command{
		Use:   "dash",
		Short: "serve the web dashboard: live counts, tasks, dead tasks by error, workers, flows",
		Long: `Serves the web dashboard (the library's dash package) until interrupted
(SIGINT or SIGTERM: open connections get 5 s to finish). The browser gets
counts pushed over server-sent events; one poll per second reads Redis
however many tabs are open. Actions (retry or delete all dead, delete all
waiting, pause, resume, cancel a task) are POSTs with a CSRF token; --read-only hides and
refuses them. With --user and --password (or ` + envDashUser + ` and
` + envDashPassword + `) every request needs HTTP basic authentication;
without them, keep --addr on a loopback address or behind your own proxy.`,
		Example: `  worqr dash
  worqr dash --addr 0.0.0.0:8080 --read-only --user ops --password "$PW"
  WORQR_DASH_USER=ops WORQR_DASH_PASSWORD=s3cret worqr dash --prefix /worqr`,
		Args: args(),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	f.BoolVar(&readOnly, "read-only", false, "hide and refuse every action")
	f.StringVar(&prefix, "prefix", "", "serve under this path prefix, e.g. /worqr")
	f.StringVar(&user, "user", "", "basic-auth user (env "+envDashUser+")")
	f.StringVar(&password, "password", "", "basic-auth password (env "+envDashPassword+")")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if user == "" {
			user = a.env.getenv(envDashUser)
		}
		if password == "" {
			password = a.env.getenv(envDashPassword)
		}
		if (user == "") != (password == "") {
			return usagef("--user and --password go together (or %s and %s)", envDashUser, envDashPassword)
		}
		prefix = strings.TrimRight(prefix, "/")
		if prefix != "" && !strings.HasPrefix(prefix, "/") {
			return usagef("--prefix %q: must start with /", prefix)
		}
		for _, c := range prefix {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/-_.~", c)) {
				return usagef("--prefix %q: %q is not allowed (want a path of A-Z a-z 0-9 - _ . ~ and /)", prefix, c)
			}
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return usagef("--addr %s: %v", addr, err)
		}
		d := dash.New(a.in, &dash.Options{ReadOnly: readOnly, Prefix: prefix, Client: a.client})
		defer d.Close()
		var h http.Handler = d
		if user != "" {
			h = dash.BasicAuth(user, password, h)
		}
		// Prometheus metrics of the namespace at /metrics: gauges read at
		// scrape time, counters and histograms from the live events.
		coll := worqrprom.NewCollector(a.in, nil)
		go func() { _ = coll.Run(ctx) }()
		reg := prometheus.NewRegistry()
		reg.MustRegister(coll)
		var metrics http.Handler = worqrprom.Handler(reg)
		if user != "" {
			metrics = dash.BasicAuth(user, password, metrics)
		}
		mux := http.NewServeMux()
		mux.Handle(prefix+"/", h)
		mux.Handle("/metrics", metrics)
		if prefix != "" {
			mux.Handle("/{$}", http.RedirectHandler(prefix+"/", http.StatusFound))
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		mode := ""
		if readOnly {
			mode = " (read-only)"
		}
		fmt.Fprintf(a.env.err, "worqr dash: serving namespace %s on http://%s%s/%s\n", a.namespace, ln.Addr(), prefix, mode)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		select {
		case err := <-served:
			return err
		case <-ctx.Done():
		}
		d.Close() // ends the live streams, so Shutdown need not wait for them
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		fmt.Fprintln(a.env.err, "worqr dash: stopped")
		return nil
	})
	return cmd
}

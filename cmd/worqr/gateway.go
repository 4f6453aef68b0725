package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/gateway"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

const envGatewayToken = "WORQR_GATEWAY_TOKEN"

// gatewayCmd serves the gateway. It is a subcommand of the operator CLI
// rather than a binary of its own: it needs exactly the CLI's Redis
// connection (URL or cluster seeds, TLS files, namespace, log level, all
// flags and environment variables an operator already sets), and one binary
// to ship is simpler than two. Library users are unaffected: the CLI and
// the gateway are nested modules, so connect and protobuf stay out of the
// library's go.mod.
func (a *app) gatewayCmd() *cobra.Command {
	var (
		addr, token, certFile, keyFile string
		ttl, grace, reaper, retention  time.Duration
		maxSessions, maxMessage        int
		queues                         []string
	)
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "serve remote workers and producers in any language over gRPC, gRPC-Web and JSON (one port)",
		Long: `Serves the worqr gateway (docs/GATEWAY.md) until interrupted: producers
enqueue, cancel and read tasks and queue counts; remote workers open a
session (a worqr worker id kept alive by their beats), take tasks and end
each taking by its pid. A session that stops beating for --session-ttl is
lost: its takings are requeued by the recovery, and its late calls are
refused with failed_precondition.

Every stand-alone queue is served with the default settings (25 attempts,
exponential backoff); --queue limits the queues sessions may take from.
A task a session ends is deleted at once unless --retention keeps it
readable (GetTask: its state, and a finished task's result) that long.
Flows are served by embedding the gateway package in a Go program that
declares them (remote.Config.Flows).

With --token (or ` + envGatewayToken + `) every call needs
"Authorization: Bearer <token>"; without it keep --addr on a loopback
address or behind your own proxy. --tls-cert and --tls-key serve HTTPS
(gRPC then uses HTTP/2 over TLS; without TLS, cleartext HTTP/2 (h2c)).
SIGINT or SIGTERM drain: sessions are told to finish what they run, for up
to --grace; what still runs is then put back at the front of its queue.`,
		Example: `  worqr gateway
  WORQR_GATEWAY_TOKEN=s3cret worqr gateway --addr 0.0.0.0:8090 --tls-cert cert.pem --tls-key key.pem
  worqr gateway --queue emails --queue thumbnails --session-ttl 30s --retention 1h`,
		Args: args(),
		PreRun: func(*cobra.Command, []string) {
			a.maxIdle = 64
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8090", "address to listen on")
	f.StringVar(&token, "token", "", "bearer token every call must carry (env "+envGatewayToken+")")
	f.StringVar(&certFile, "tls-cert", "", "PEM certificate: serve HTTPS (with --tls-key)")
	f.StringVar(&keyFile, "tls-key", "", "PEM key of --tls-cert")
	f.DurationVar(&ttl, "session-ttl", remote.DefaultSessionTTL, "a session silent this long is lost (remotes beat every third of it)")
	f.DurationVar(&reaper, "reaper-interval", defaults.ReaperInterval, "how often this process looks for dead workers")
	f.DurationVar(&grace, "grace", 30*time.Second, "on SIGINT/SIGTERM, how long sessions may finish what they run")
	f.IntVar(&maxSessions, "max-sessions", remote.DefaultMaxSessions, "sessions open at once")
	f.IntVar(&maxMessage, "max-message-bytes", gateway.DefaultMaxMessageBytes, "largest request message")
	f.StringArrayVar(&queues, "queue", nil, "a queue sessions may take from (repeat; default: any)")
	f.DurationVar(&retention, "retention", 0, "how long a task a session ended stays readable (GetTask, its result); 0: deleted at once")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if token == "" {
			token = a.env.getenv(envGatewayToken)
		}
		if (certFile == "") != (keyFile == "") {
			return usagef("--tls-cert and --tls-key go together")
		}
		if maxMessage < 1 {
			return usagef("--max-message-bytes %d: must be at least 1", maxMessage)
		}
		if retention < 0 {
			return usagef("--retention %s: must not be negative", retention)
		}
		cfg := remote.Config{Config: worqr.Config{Namespace: a.namespace, Logger: a.logger,
			Replicas: a.replicas, ReplicaTimeout: a.replicaTimeout},
			SessionTTL: ttl, ReaperInterval: reaper, MaxSessions: maxSessions, AnyQueue: len(queues) == 0,
			DefaultQueue: worqr.QueueConfig{Retention: retention}}
		if len(queues) > 0 {
			cfg.Queues = map[string]worqr.QueueConfig{}
			for _, q := range queues {
				if err := worqr.CheckQueueName(q); err != nil {
					return usagef("--queue %s", ruleOf(err))
				}
				cfg.Queues[q] = worqr.QueueConfig{Retention: retention}
			}
		}
		rs, err := remote.NewServer(a.pool, &cfg)
		if err != nil {
			var ie *worqr.InvalidError
			if errors.As(err, &ie) {
				return usagef("%s %s", ie.Field, ie.Rule)
			}
			return err
		}
		srv, err := gateway.NewServer(addr, gateway.Config{Remote: rs, Client: a.client, Inspector: a.in, Logger: a.logger,
			Token: token, MaxMessageBytes: maxMessage})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return usagef("--addr %s: %v", addr, err)
		}
		if err := rs.Start(ctx); err != nil {
			ln.Close()
			return err
		}
		scheme := "http"
		if certFile != "" {
			scheme = "https"
		}
		auth := ""
		if token == "" {
			auth = " (no token: every caller is trusted)"
		}
		fmt.Fprintf(a.env.err, "worqr gateway: serving namespace %s on %s://%s%s\n", a.namespace, scheme, ln.Addr(), auth)
		served := make(chan error, 1)
		go func() {
			if certFile != "" {
				served <- srv.ServeTLS(ln, certFile, keyFile)
			} else {
				served <- srv.Serve(ln)
			}
		}()
		select {
		case err := <-served:
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = rs.Stop(sctx)
			return err
		case <-ctx.Done():
		}
		fmt.Fprintf(a.env.err, "worqr gateway: draining (up to %s)\n", grace)
		gctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		stopErr := rs.Stop(gctx) // sessions see drain on their beats; takes return nothing
		sctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel2()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		if stopErr != nil {
			fmt.Fprintln(a.env.err, "worqr gateway: grace period over; what still ran was put back in its queue")
		}
		fmt.Fprintln(a.env.err, "worqr gateway: stopped")
		return nil
	})
	return cmd
}

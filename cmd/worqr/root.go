package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// The environment variables the CLI reads (.example.env lists them too).
const (
	envRedisURL  = "WORQR_REDIS_URL"
	envCluster   = "WORQR_REDIS_CLUSTER"
	envSentinel  = "WORQR_REDIS_SENTINEL"
	envSentUser  = "WORQR_SENTINEL_USER"
	envSentPass  = "WORQR_SENTINEL_PASSWORD"
	envNamespace = "WORQR_NAMESPACE"
	envTLSCA     = "WORQR_TLS_CA_FILE"
	envTLSCert   = "WORQR_TLS_CERT_FILE"
	envTLSKey    = "WORQR_TLS_KEY_FILE"
	envLogLevel  = "WORQR_LOG_LEVEL"

	envReplicas       = "WORQR_REPLICAS"
	envReplicaTimeout = "WORQR_REPLICA_TIMEOUT"
)

const envHelp = `Environment (flags win; an empty value means unset):
  WORQR_REDIS_URL      Redis URL, redis[s]://[user:password@]host[:port][/db] (required
                       unless WORQR_REDIS_CLUSTER is set); a node of a Redis Cluster
                       is followed to the whole cluster
  WORQR_REDIS_CLUSTER  Redis Cluster seeds instead: host:port,host:port, or
                       redis[s]://[user:password@]host:port URLs (the first one's user,
                       password and TLS apply to every node)
  WORQR_REDIS_SENTINEL a primary managed by Redis Sentinel instead: master-name@host:port,
                       host:port of the sentinels (a redis[s]:// URL's user, password, TLS
                       and database apply to the primary); failovers are followed
  WORQR_SENTINEL_USER, WORQR_SENTINEL_PASSWORD
                       authenticate to the sentinels (their own ACL user and password)
  WORQR_NAMESPACE      key prefix of every Redis key (default "worqr")
  WORQR_TLS_CA_FILE    PEM file of the CAs that sign the server's certificate (rediss:// only)
  WORQR_TLS_CERT_FILE  PEM client certificate, for servers that require one (rediss:// only)
  WORQR_TLS_KEY_FILE   PEM key of the client certificate
  WORQR_LOG_LEVEL      debug, info, warn or error: the library's logs on stderr (default warn)
  WORQR_REPLICAS       replicas every enqueue (and every end by the gateway's remote
                       workers) waits for, Redis WAIT (default 0: no wait)
  WORQR_REPLICA_TIMEOUT how long that wait may last, 1ms to 4s (default 1s; only with
                       WORQR_REPLICAS)

Exit codes: 0 success, 1 failure, 2 bad input (flag, argument, or a bulk
action without --yes when stdin is not a terminal); task wait and flow wait
say how what they waited for ended: 3 dead or failed, 4 cancelled, 5
expired, 6 timed out.
`

// app holds the global flags and, once connected, the pool and the API.
type app struct {
	env       *env
	redisURL  string
	namespace string

	pool interface {
		worqr.ConnGetter
		Close() error
	}
	in     *worqr.Inspector
	client *worqr.Client
	logger *slog.Logger
	// replicas and replicaTimeout are WORQR_REPLICAS and
	// WORQR_REPLICA_TIMEOUT, for the gateway's remote workers.
	replicas       int
	replicaTimeout time.Duration
	// maxIdle is the pool's idle connections (default 4; the gateway,
	// a server, keeps more).
	maxIdle int
}

func newRoot(e *env) *cobra.Command {
	a := &app{env: e}
	root := &cobra.Command{
		Use:   prog,
		Short: "operate worqr queues in Redis: counts, tasks, dead sets, workers, flow runs",
		Long: `worqr reads and steers what a worqr namespace holds in Redis, through the
library's public Inspector and Client.

` + envHelp,
		Example: `  export WORQR_REDIS_URL=redis://localhost:6379/0
  worqr stats
  worqr stats --watch
  worqr stats --history
  worqr dead errors emails
  worqr dead retry emails --all
  printf '%s' '{"to":"ada@example.com"}' | worqr enqueue emails -`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No Args: cobra then rejects an unknown command (exit 2); no
		// command at all shows this help.
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
	pf := root.PersistentFlags()
	// The default is not shown in --help: the URL may hold a password.
	pf.StringVar(&a.redisURL, "redis-url", "",
		"Redis URL, redis[s]://[user:password@]host[:port][/db] (default: env "+envRedisURL+")")
	ns := e.getenv(envNamespace)
	if ns == "" {
		ns = defaults.Namespace
	}
	pf.StringVar(&a.namespace, "namespace", ns, "key prefix of every Redis key (env "+envNamespace+")")

	root.AddCommand(
		a.statsCmd(),
		a.queueCmd(),
		a.taskCmd(),
		a.deadCmd(),
		a.workersCmd(),
		a.flowCmd(),
		a.periodicCmd(),
		a.enqueueCmd(),
		a.loadCmd(),
		a.eventsCmd(),
		a.dashCmd(),
		a.gatewayCmd(),
		a.versionCmd(),
		a.completionCmd(),
	)
	// The environment is described once, in worqr --help; every command
	// that reads it points there.
	for _, c := range root.Commands() {
		addEnvPointer(c)
	}
	return root
}

// envPointer ends the help of every command that reads the environment.
const envPointer = `Redis and the namespace come from the flags or from the WORQR_* environment
variables: 'worqr --help' lists them.`

func addEnvPointer(c *cobra.Command) {
	switch c.Name() {
	case "version", "completion":
		return
	}
	if c.Long == "" {
		c.Long = c.Short
	}
	c.Long += "\n\n" + envPointer
	for _, sub := range c.Commands() {
		addEnvPointer(sub)
	}
}

// body wraps a command's work: it connects to Redis first (unless offline),
// and marks what it returns as a run error (exit 1) unless it is a usage
// error.
func (a *app) body(offline bool, fn func(ctx context.Context, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if !offline {
			if err := a.connect(ctx, cmd); err != nil {
				return err
			}
			defer a.pool.Close()
			// What the command did reaches the events and the history:
			// the process exits before the next publication would.
			defer func() {
				a.client.Flush()
				a.in.Flush()
			}()
		}
		err := fn(ctx, cmd, args)
		if err == nil {
			return nil
		}
		var ue *usageError
		if errors.As(err, &ue) || errors.Is(err, worqr.ErrInvalid) {
			return err
		}
		return &runError{err: err}
	}
}

// source names where a global flag's value came from.
func source(cmd *cobra.Command, flag, env string, getenv func(string) string) string {
	if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
		return "--" + flag
	}
	if getenv(env) != "" {
		return env
	}
	return "--" + flag
}

// connect checks the settings, builds the pool, the inspector and the
// client, and checks that Redis answers.
func (a *app) connect(ctx context.Context, cmd *cobra.Command) error {
	getenv := a.env.getenv
	if a.redisURL == "" {
		a.redisURL = getenv(envRedisURL)
	}
	cluster, sentinel := getenv(envCluster), getenv(envSentinel)
	if f := cmd.Flags().Lookup("redis-url"); f != nil && f.Changed {
		cluster, sentinel = "", "" // the flag wins over the variables
	}
	set := 0
	for _, v := range []string{a.redisURL, cluster, sentinel} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return usagef("set one of %s, %s and %s, not several", envRedisURL, envCluster, envSentinel)
	}
	if set == 0 {
		return usagef("--redis-url is required (or set %s), for example redis://localhost:6379/0; for a Redis Cluster set %s, for Sentinel %s", envRedisURL, envCluster, envSentinel)
	}
	if cluster == "" && sentinel == "" {
		if err := checkRedisURL(a.redisURL); err != nil {
			return usagef("%s: %v", source(cmd, "redis-url", envRedisURL, getenv), err)
		}
	}
	if err := worqr.CheckQueueName(a.namespace); err != nil {
		return usagef("%s %s", source(cmd, "namespace", envNamespace, getenv), ruleOf(err))
	}
	logger, err := newLogger(getenv)
	if err != nil {
		return err
	}
	replicas, replicaTimeout, err := readReplication(getenv)
	if err != nil {
		return err
	}
	opts := &redisconn.Options{CAFile: getenv(envTLSCA), CertFile: getenv(envTLSCert), KeyFile: getenv(envTLSKey), MaxIdle: max(a.maxIdle, 4)}
	var pool interface {
		worqr.ConnGetter
		Close() error
	}
	where := redacted(a.redisURL)
	switch {
	case sentinel != "":
		master, sentinels, err := redisconn.ParseSentinel(sentinel)
		if err != nil {
			return usagef("%s: %s", envSentinel, ruleOf(err))
		}
		shown := make([]string, len(sentinels))
		for i, s := range sentinels {
			shown[i] = s
			if strings.Contains(s, "://") {
				shown[i] = redacted(s)
			}
		}
		where = fmt.Sprintf("the primary %s of the sentinels at %s", master, strings.Join(shown, ","))
		opts.Logger = logger
		opts.SentinelUser, opts.SentinelPassword = getenv(envSentUser), getenv(envSentPass)
		sp, err := redisconn.NewSentinel(master, sentinels, opts)
		if err != nil {
			var ie *worqr.InvalidError
			if errors.As(err, &ie) {
				return usagef("%s: %s", envSentinel, ie.Rule)
			}
			return &runError{fmt.Errorf("cannot reach %s: %w", where, err)}
		}
		pool = sp
	case cluster != "":
		var seeds, shown []string
		for _, s := range strings.Split(cluster, ",") {
			if s = strings.TrimSpace(s); s != "" {
				seeds = append(seeds, s)
				if strings.Contains(s, "://") {
					shown = append(shown, redacted(s))
				} else {
					shown = append(shown, s)
				}
			}
		}
		where = "the Redis Cluster at " + strings.Join(shown, ",")
		cp, err := redisconn.NewCluster(seeds, opts)
		if err != nil {
			var ie *worqr.InvalidError
			if errors.As(err, &ie) {
				return usagef("%s: %s", envCluster, ie.Rule)
			}
			return &runError{fmt.Errorf("cannot reach %s: %w", where, err)}
		}
		pool = cp
	default:
		p, err := redisconn.NewPool(a.redisURL, opts)
		if err != nil {
			return usagef("%s (%s, %s, %s)", ruleOf(err), envTLSCA, envTLSCert, envTLSKey)
		}
		pool = p
		if clusterNode(ctx, p) {
			// One node of a Redis Cluster, as other Redis tools are
			// pointed at one: follow the whole cluster from it (its
			// other masters would answer MOVED).
			p.Close()
			where = "the Redis Cluster of " + where
			cp, err := redisconn.NewCluster([]string{a.redisURL}, opts)
			if err != nil {
				var ie *worqr.InvalidError
				if errors.As(err, &ie) {
					return usagef("%s names a node of a Redis Cluster: %s", source(cmd, "redis-url", envRedisURL, getenv), ie.Rule)
				}
				return &runError{fmt.Errorf("cannot reach %s: %w", where, err)}
			}
			pool = cp
		}
	}
	cfg := &worqr.Config{Namespace: a.namespace, Logger: logger}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		pool.Close()
		return err
	}
	ccfg := *cfg
	ccfg.Replicas, ccfg.ReplicaTimeout = replicas, replicaTimeout
	client, err := worqr.NewClient(pool, &ccfg)
	if err != nil {
		pool.Close()
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := in.Ping(pctx); err != nil {
		pool.Close()
		return &runError{fmt.Errorf("cannot reach Redis at %s: %w", where, err)}
	}
	a.pool, a.in, a.client, a.logger = pool, in, client, logger
	a.replicas, a.replicaTimeout = replicas, replicaTimeout
	return nil
}

// clusterNode reports whether the server of p runs in cluster mode. An
// unreachable server is not: the ping that follows says so.
func clusterNode(ctx context.Context, p worqr.ConnGetter) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	on, err := redisconn.ClusterMode(ctx, p)
	return err == nil && on
}

// readReplication reads WORQR_REPLICAS (a whole number, 0 or more) and
// WORQR_REPLICA_TIMEOUT (a Go duration from 1ms to worqr.MaxReplicaTimeout,
// only with WORQR_REPLICAS above 0): Config.Replicas and ReplicaTimeout of
// the CLI's client and of the gateway's remote workers. A bad value is a
// usage error naming its variable.
func readReplication(getenv func(string) string) (int, time.Duration, error) {
	var n int
	if v := strings.TrimSpace(getenv(envReplicas)); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return 0, 0, usagef("%s: %q is not a whole number (want the replicas to wait for, for example 1; 0 or empty: none)", envReplicas, v)
		}
		if n < 0 {
			return 0, 0, usagef("%s: %q must not be negative (0 or empty: no wait)", envReplicas, v)
		}
	}
	var d time.Duration
	if v := strings.TrimSpace(getenv(envReplicaTimeout)); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, 0, usagef("%s: %q is not a duration (want for example 500ms or 2s)", envReplicaTimeout, v)
		}
		if d < time.Millisecond || d > defaults.MaxReplicaTimeout {
			return 0, 0, usagef("%s: %q must be between 1ms and %s", envReplicaTimeout, v, defaults.MaxReplicaTimeout)
		}
		if n == 0 {
			return 0, 0, usagef("%s: %q applies only with %s above 0 (set it, or unset %s)", envReplicaTimeout, v, envReplicas, envReplicaTimeout)
		}
	}
	return n, d, nil
}

func newLogger(getenv func(string) string) (*slog.Logger, error) {
	var level slog.Level
	switch v := strings.ToLower(strings.TrimSpace(getenv(envLogLevel))); v {
	case "", "warn":
		level = slog.LevelWarn
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "error":
		level = slog.LevelError
	default:
		return nil, usagef("%s: %q is not a log level (want debug, info, warn or error)", envLogLevel, v)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}

// ruleOf returns the rule an *worqr.InvalidError broke, or err's text.
func ruleOf(err error) string {
	var ie *worqr.InvalidError
	if errors.As(err, &ie) {
		return ie.Rule
	}
	return err.Error()
}

func checkRedisURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL (want redis[s]://[user:password@]host[:port][/db])")
	}
	switch u.Scheme {
	case "redis", "rediss", "valkey", "valkeys":
	default:
		return fmt.Errorf("%q: the scheme must be redis:// or rediss://", u.Redacted())
	}
	if u.Opaque != "" {
		return fmt.Errorf("%q: want redis://host:port, not redis:host", u.Redacted())
	}
	return nil
}

// redacted hides the password of a Redis URL.
func redacted(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// checkQueue checks a queue argument: "<queue>" or "<flow>/<queue>".
func checkQueue(arg, q string) error {
	if flow, name, ok := strings.Cut(q, "/"); ok {
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("%s %q: flow part %s", arg, q, ruleOf(err))
		}
		if err := worqr.CheckQueueName(name); err != nil {
			return usagef("%s %q: queue part %s", arg, q, ruleOf(err))
		}
		return nil
	}
	if err := worqr.CheckQueueName(q); err != nil {
		return usagef("%s %q: %s", arg, q, ruleOf(err))
	}
	return nil
}

// unknownQueueError says that a namespace does not know a queue.
type unknownQueueError struct{ q, ns string }

func (e *unknownQueueError) Error() string {
	return fmt.Sprintf("queue %q is not known in namespace %q ('worqr queue ls' lists the known ones)", e.q, e.ns)
}

// mustKnow returns an *unknownQueueError when the namespace does not know
// queue q (one SISMEMBER: for commands that need no counts).
func (a *app) mustKnow(ctx context.Context, q string) error {
	ok, err := a.in.Known(ctx, q)
	if err != nil {
		return err
	}
	if !ok {
		return &unknownQueueError{q: q, ns: a.namespace}
	}
	return nil
}

// knownArg checks the output flag and queue argument q of a listing, then
// that the namespace knows q (a typo would list nothing, exit 0).
func (a *app) knownArg(ctx context.Context, o *output, q string) error {
	if err := o.check(); err != nil {
		return err
	}
	if err := checkQueue("<queue>", q); err != nil {
		return err
	}
	return a.mustKnow(ctx, q)
}

// knownQueue returns the counts of queue q, or an error naming the queue
// when the namespace does not know it (a typo would otherwise act on nothing).
func (a *app) knownQueue(ctx context.Context, q string) (*worqr.QueueInfo, error) {
	qs, err := a.in.Queues(ctx)
	if err != nil {
		return nil, err
	}
	for i := range qs {
		if qs[i].Name == q {
			return &qs[i], nil
		}
	}
	return nil, &unknownQueueError{q: q, ns: a.namespace}
}

// args returns a cobra argument check that names the arguments: usage
// errors say which is missing or extra.
func args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		if len(got) < len(names) {
			return usagef("missing argument <%s> (usage: %s)", names[len(got)], cmd.UseLine())
		}
		if len(got) > len(names) {
			return usagef("unexpected argument %q (usage: %s)", got[len(names)], cmd.UseLine())
		}
		return nil
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// The environment variables the binary reads. .example.env lists them too.
const (
	envRedisURL          = "WORQR_REDIS_URL"
	envRedisCluster      = "WORQR_REDIS_CLUSTER"
	envRedisSentinel     = "WORQR_REDIS_SENTINEL"
	envSentinelUser      = "WORQR_SENTINEL_USER"
	envSentinelPassword  = "WORQR_SENTINEL_PASSWORD"
	envNamespace         = "WORQR_NAMESPACE"
	envHeartbeatInterval = "WORQR_HEARTBEAT_INTERVAL"
	envHeartbeatTTL      = "WORQR_HEARTBEAT_TTL"
	envReaperInterval    = "WORQR_REAPER_INTERVAL"
	envPollInterval      = "WORQR_POLL_INTERVAL"
	envLogLevel          = "WORQR_LOG_LEVEL"
	envTLSCA             = "WORQR_TLS_CA_FILE"
	envTLSCert           = "WORQR_TLS_CERT_FILE"
	envTLSKey            = "WORQR_TLS_KEY_FILE"
	envReplicas          = "WORQR_REPLICAS"
	envReplicaTimeout    = "WORQR_REPLICA_TIMEOUT"
)

// usageError is bad input: the binary exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelpShown ends a subcommand whose --help was printed.
var errHelpShown = errors.New("help shown")

// envHelp describes the variables; timings says whether the worker timings
// apply.
func envHelp(redisRequired, timings bool) string {
	var b strings.Builder
	if redisRequired {
		fmt.Fprintf(&b, "  %-25s Redis URL, redis[s]://[user:password@]host[:port][/db]; required except for the demo\n", envRedisURL)
	} else {
		fmt.Fprintf(&b, "  %-25s Redis URL; when unset the demo uses an embedded in-process Redis\n", envRedisURL)
	}
	fmt.Fprintf(&b, "  %-25s Redis Cluster seeds, host:port,host:port (or redis[s]://[user:password@]host:port; the first URL's user, password and TLS apply to every node): use the cluster instead of %s%s\n", envRedisCluster, envRedisURL, map[bool]string{true: "", false: " (not for the demo)"}[redisRequired])
	fmt.Fprintf(&b, "  %-25s master-name@host:port,host:port: the primary these sentinels monitor, instead of %s (the first redis[s]:// URL's user, password, TLS and database apply to it)%s\n", envRedisSentinel, envRedisURL, map[bool]string{true: "", false: " (not for the demo)"}[redisRequired])
	if redisRequired {
		fmt.Fprintf(&b, "  %-25s the ACL user and password to authenticate to the sentinels with\n", envSentinelUser+", "+envSentinelPassword)
	}
	fmt.Fprintf(&b, "  %-25s key prefix, so several apps can share one Redis (default %q; the demo uses a fresh one)\n", envNamespace, defaults.Namespace)
	if timings {
		fmt.Fprintf(&b, "  %-25s how often a worker renews its keepalive (default %s)\n", envHeartbeatInterval, defaults.HeartbeatInterval)
		fmt.Fprintf(&b, "  %-25s keepalive lifetime: a worker silent this long is dead (default %s)\n", envHeartbeatTTL, defaults.HeartbeatTTL)
		fmt.Fprintf(&b, "  %-25s how often a worker looks for dead peers (default %s)\n", envReaperInterval, defaults.ReaperInterval)
		fmt.Fprintf(&b, "  %-25s how often an idle worker polls its queues (default %s)\n", envPollInterval, defaults.PollInterval)
	}
	fmt.Fprintf(&b, "  %-25s replicas every enqueue and every end of a taking waits for (Redis WAIT); default 0: none\n", envReplicas)
	fmt.Fprintf(&b, "  %-25s how long that wait may last, 1ms to %s (default %s; only with %s)\n", envReplicaTimeout, defaults.MaxReplicaTimeout, defaults.ReplicaTimeout, envReplicas)
	fmt.Fprintf(&b, "  %-25s PEM file of the CAs that sign the server's certificate (rediss:// only)\n", envTLSCA)
	fmt.Fprintf(&b, "  %-25s PEM client certificate, for servers that require one (rediss:// only)\n", envTLSCert)
	fmt.Fprintf(&b, "  %-25s PEM key of the client certificate\n", envTLSKey)
	fmt.Fprintf(&b, "  %-25s debug, info, warn or error; logs go to stderr (default info)\n", envLogLevel)
	return b.String()
}

// newFlagSet returns a flag set that prints nothing by itself: parse reports
// errors and help.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args. On --help it prints the usage (head, then the flags,
// then tail) on stdout and returns errHelpShown; a bad flag is a usageError.
func parse(fs *flag.FlagSet, args []string, out io.Writer, head, tail string) error {
	if err := parseFlags(fs, args, out, head, tail); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// parseWithArgs is parse for a subcommand that also takes arguments: flags
// may come before, between or after them ("--" ends the flags). It returns
// the arguments in order.
func parseWithArgs(fs *flag.FlagSet, args []string, out io.Writer, head, tail string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args, out, head, tail); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// parseFlags is fs.Parse with parse's handling of --help and of errors.
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer, head, tail string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(out, head)
		fmt.Fprintln(out, "\nFlags:")
		fs.SetOutput(out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		fmt.Fprint(out, tail)
		return errHelpShown
	}
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	return nil
}

// common holds the flags every subcommand shares.
type common struct {
	fs        *flag.FlagSet
	getenv    func(string) string
	redisURL  string
	cluster   string // comma-separated seeds: a Redis Cluster instead of redisURL
	sentinel  string // master-name@host:port,...: a primary found through Redis Sentinel
	namespace string
}

func (c *common) register(fs *flag.FlagSet, getenv func(string) string, namespace bool) {
	c.fs, c.getenv = fs, getenv
	fs.StringVar(&c.redisURL, "redis-url", getenv(envRedisURL),
		"Redis URL, redis[s]://[user:password@]host[:port][/db] (env "+envRedisURL+")")
	fs.StringVar(&c.cluster, "redis-cluster", getenv(envRedisCluster),
		"Redis Cluster seeds, host:port,host:port or redis[s]:// URLs, instead of --redis-url (env "+envRedisCluster+")")
	fs.StringVar(&c.sentinel, "redis-sentinel", getenv(envRedisSentinel),
		"master-name@host:port,host:port: the primary that these sentinels monitor, instead of --redis-url (env "+envRedisSentinel+")")
	// --help shows each flag's default: the variables' values, with their
	// passwords hidden.
	for _, name := range []string{"redis-url", "redis-cluster", "redis-sentinel"} {
		f := fs.Lookup(name)
		f.DefValue = redactedList(f.DefValue)
	}
	if namespace {
		ns := getenv(envNamespace)
		if ns == "" {
			ns = defaults.Namespace
		}
		fs.StringVar(&c.namespace, "namespace", ns, "key prefix of every Redis key (env "+envNamespace+")")
	}
}

// source names where flag name's value came from: the flag itself or its
// variable.
func (c *common) source(name, env string) string {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if !set && c.getenv(env) != "" {
		return env
	}
	return "--" + name
}

// check validates the shared flags; redis says whether --redis-url is
// required.
func (c *common) check(redisRequired bool) error {
	if c.sentinel != "" {
		if !redisRequired {
			return usagef("the demo runs on one Redis it is given by URL (%s, or an embedded one): unset %s", envRedisURL, envRedisSentinel)
		}
		if c.cluster != "" {
			return usagef("set %s or %s, not both", c.source("redis-sentinel", envRedisSentinel), c.source("redis-cluster", envRedisCluster))
		}
		if c.redisURL != "" {
			// A flag wins over a variable; two flags or two variables clash.
			u, se := c.source("redis-url", envRedisURL), c.source("redis-sentinel", envRedisSentinel)
			switch {
			case u == "--redis-url" && se == envRedisSentinel:
				c.sentinel = ""
				return c.check(redisRequired)
			case se == "--redis-sentinel" && u == envRedisURL:
				c.redisURL = ""
			default:
				return usagef("set %s or %s, not both", u, se)
			}
		}
		if _, _, err := redisconn.ParseSentinel(c.sentinel); err != nil {
			return usagef("%s: %s", c.source("redis-sentinel", envRedisSentinel), ruleOf(err))
		}
		return c.checkNamespace()
	}
	if c.cluster != "" {
		if !redisRequired {
			return usagef("the demo runs on one Redis (%s, or an embedded one), not on a cluster: unset %s", envRedisURL, envRedisCluster)
		}
		if c.redisURL != "" {
			// A flag wins over a variable; two flags or two variables clash.
			u, cl := c.source("redis-url", envRedisURL), c.source("redis-cluster", envRedisCluster)
			switch {
			case u == "--redis-url" && cl == envRedisCluster:
				c.cluster = ""
				return c.check(redisRequired)
			case cl == "--redis-cluster" && u == envRedisURL:
				c.redisURL = ""
			default:
				return usagef("set %s or %s, not both", u, cl)
			}
		}
		for _, seed := range c.seeds() {
			if strings.Contains(seed, "://") {
				if err := checkRedisURL(seed); err != nil {
					return usagef("%s: %v", c.source("redis-cluster", envRedisCluster), err)
				}
			} else if _, _, err := net.SplitHostPort(seed); err != nil {
				return usagef("%s: seed %q: want host:port", c.source("redis-cluster", envRedisCluster), seed)
			}
		}
		if len(c.seeds()) == 0 {
			return usagef("%s: no seed address", c.source("redis-cluster", envRedisCluster))
		}
	} else if c.redisURL == "" {
		if redisRequired {
			return usagef("--redis-url is required (or set %s), for example redis://localhost:6379/0", envRedisURL)
		}
	} else if err := checkRedisURL(c.redisURL); err != nil {
		return usagef("%s: %v", c.source("redis-url", envRedisURL), err)
	} else if p, err := redisconn.NewPool(c.redisURL, c.poolOptions()); err != nil {
		return usagef("%s (%s, %s, %s)", ruleOf(err), envTLSCA, envTLSCert, envTLSKey)
	} else {
		p.Close() // it dialed nothing: the check is of the settings only
	}
	return c.checkNamespace()
}

// checkNamespace checks --namespace where the command has it.
func (c *common) checkNamespace() error {
	if c.fs.Lookup("namespace") != nil {
		if err := worqr.CheckQueueName(c.namespace); err != nil {
			return usagef("%s %s", c.source("namespace", envNamespace), ruleOf(err))
		}
	}
	return nil
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
		return fmt.Errorf("not a URL: %v", err)
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

// urlPassword is the password of a redis[s]:// URL within a list of them
// (cluster seeds, sentinels).
var urlPassword = regexp.MustCompile(`(://[^:@/,]*):[^@/,]*@`)

// redactedList hides the password of every URL in s, a URL or a list.
func redactedList(s string) string {
	return urlPassword.ReplaceAllString(s, "${1}:xxxxx@")
}

// poolOptions says how to reach Redis: TLS files come from
// WORQR_TLS_CA_FILE, WORQR_TLS_CERT_FILE and WORQR_TLS_KEY_FILE (refused with
// a redis:// URL: TLS files without TLS are a mistake worth naming).
func (c *common) poolOptions() *redisconn.Options {
	return &redisconn.Options{CAFile: c.getenv(envTLSCA), CertFile: c.getenv(envTLSCert), KeyFile: c.getenv(envTLSKey),
		SentinelUser: c.getenv(envSentinelUser), SentinelPassword: c.getenv(envSentinelPassword)}
}

// newPool returns a redigo pool for rawURL (it dials nothing yet). The caller
// closes it. Its errors never show the password.
func newPool(rawURL string, o *redisconn.Options) (*redis.Pool, error) {
	p, err := redisconn.NewPool(rawURL, o)
	if err != nil {
		var ie *worqr.InvalidError
		if errors.As(err, &ie) {
			return nil, usagef("%s", ie.Rule)
		}
		return nil, usagef("%v", err)
	}
	return p, nil
}

// seeds returns the cluster seeds, without blanks.
func (c *common) seeds() []string {
	var out []string
	for _, s := range strings.Split(c.cluster, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// where names the Redis the command uses, without its password.
func (c *common) where() string {
	if c.sentinel != "" {
		master, sentinels, _ := redisconn.ParseSentinel(c.sentinel)
		for i, s := range sentinels {
			if strings.Contains(s, "://") {
				sentinels[i] = redacted(s)
			}
		}
		return fmt.Sprintf("the primary %s of the sentinels at %s", master, strings.Join(sentinels, ","))
	}
	if c.cluster != "" {
		out := make([]string, 0, len(c.seeds()))
		for _, s := range c.seeds() {
			if strings.Contains(s, "://") {
				s = redacted(s)
			}
			out = append(out, s)
		}
		return "the Redis Cluster at " + strings.Join(out, ",")
	}
	return redacted(c.redisURL)
}

// openPool returns the connection source of the command: a cluster pool
// (which reads the topology, so it dials) when --redis-cluster is set, else
// a pool for --redis-url (which dials nothing yet). The caller closes it.
func (c *common) openPool() (worqr.ConnGetter, func(), error) {
	if c.sentinel != "" {
		master, sentinels, err := redisconn.ParseSentinel(c.sentinel)
		if err != nil {
			return nil, nil, usagef("%s: %s", c.source("redis-sentinel", envRedisSentinel), ruleOf(err))
		}
		p, err := redisconn.NewSentinel(master, sentinels, c.poolOptions())
		if err != nil {
			var ie *worqr.InvalidError
			if errors.As(err, &ie) {
				return nil, nil, usagef("%s: %s", c.source("redis-sentinel", envRedisSentinel), ie.Rule)
			}
			return nil, nil, fmt.Errorf("cannot reach %s: %w", c.where(), err)
		}
		return p, func() { p.Close() }, nil
	}
	if c.cluster != "" {
		p, closePool, err := openCluster(c.seeds(), c.poolOptions())
		if err != nil {
			var ie *worqr.InvalidError
			if errors.As(err, &ie) {
				return nil, nil, usagef("%s: %s", c.source("redis-cluster", envRedisCluster), ie.Rule)
			}
			return nil, nil, fmt.Errorf("cannot reach %s: %w", c.where(), err)
		}
		return p, closePool, nil
	}
	return openURL(c.redisURL, c.poolOptions())
}

// conn is what the client subcommands share: the logger, a pool that
// answered a PING, and a client and an inspector on it.
type conn struct {
	log    *slog.Logger
	pool   worqr.ConnGetter
	client *worqr.Client
	in     *worqr.Inspector
	close  func()
}

// connect builds the logger, the pool, the client and the inspector, and
// checks that Redis answers. The caller runs close when done.
func (c *common) connect(ctx context.Context, io stdio) (*conn, error) {
	zl, log, err := newLogger(io.err, io.getenv)
	if err != nil {
		return nil, err
	}
	rep, err := readReplication(io.getenv)
	if err != nil {
		return nil, err
	}
	pool, closePool, err := c.openPool()
	if err != nil {
		return nil, err
	}
	done := func() {
		closePool()
		zl.Sync() //nolint:errcheck // stderr
	}
	if err := ping(ctx, pool, c.namespace, c.where()); err != nil {
		done()
		return nil, err
	}
	cfg := worqr.Config{Namespace: c.namespace, Logger: log}
	rep.apply(&cfg)
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		done()
		return nil, workerConfigError(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		done()
		return nil, workerConfigError(err)
	}
	return &conn{log: log, pool: pool, client: client, in: in, close: func() {
		client.Flush() // what this process did reaches the events and the history before it exits
		done()
	}}, nil
}

// ping checks that Redis answers, so that a wrong URL fails at once with a
// clear message.
func ping(ctx context.Context, pool worqr.ConnGetter, ns, where string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err == nil {
		err = in.Ping(ctx)
	}
	if err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	return nil
}

// timings are the worker timings read from the environment; zero means the
// library default.
type timings struct {
	HeartbeatInterval time.Duration
	HeartbeatTTL      time.Duration
	ReaperInterval    time.Duration
	PollInterval      time.Duration
}

// fieldEnv maps WorkerConfig fields to the variables that set them.
var fieldEnv = map[string]string{
	"HeartbeatInterval": envHeartbeatInterval,
	"HeartbeatTTL":      envHeartbeatTTL,
	"ReaperInterval":    envReaperInterval,
	"PollInterval":      envPollInterval,
	"Replicas":          envReplicas,
	"ReplicaTimeout":    envReplicaTimeout,
}

func readTimings(getenv func(string) string) (timings, error) {
	var t timings
	for _, f := range []struct {
		d   *time.Duration
		env string
	}{
		{&t.HeartbeatInterval, envHeartbeatInterval},
		{&t.HeartbeatTTL, envHeartbeatTTL},
		{&t.ReaperInterval, envReaperInterval},
		{&t.PollInterval, envPollInterval},
	} {
		v := strings.TrimSpace(getenv(f.env))
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return t, usagef("%s: %q is not a duration (want for example 500ms, 3s, 1m)", f.env, v)
		}
		if d <= 0 {
			return t, usagef("%s: %q must be positive (leave it empty for the default)", f.env, v)
		}
		*f.d = d
	}
	return t, nil
}

// apply copies the timings into cfg.
func (t timings) apply(cfg *worqr.WorkerConfig) {
	cfg.HeartbeatInterval = t.HeartbeatInterval
	cfg.HeartbeatTTL = t.HeartbeatTTL
	cfg.ReaperInterval = t.ReaperInterval
	cfg.PollInterval = t.PollInterval
}

// orDefaults returns t with the library defaults filled in.
func (t timings) orDefaults() timings {
	def := func(d, v time.Duration) time.Duration {
		if d == 0 {
			return v
		}
		return d
	}
	return timings{
		HeartbeatInterval: def(t.HeartbeatInterval, defaults.HeartbeatInterval),
		HeartbeatTTL:      def(t.HeartbeatTTL, defaults.HeartbeatTTL),
		ReaperInterval:    def(t.ReaperInterval, defaults.ReaperInterval),
		PollInterval:      def(t.PollInterval, defaults.PollInterval),
	}
}

// replication is the opt-in wait for replicas (Config.Replicas and
// ReplicaTimeout) read from WORQR_REPLICAS and WORQR_REPLICA_TIMEOUT; zero
// means none.
type replication struct {
	Replicas int
	Timeout  time.Duration
}

// readReplication reads WORQR_REPLICAS (a whole number, 0 or more) and
// WORQR_REPLICA_TIMEOUT (a Go duration from 1ms to 4s, only
// with WORQR_REPLICAS above 0), naming the variable of a bad value.
func readReplication(getenv func(string) string) (replication, error) {
	var r replication
	if v := strings.TrimSpace(getenv(envReplicas)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return r, usagef("%s: %q is not a whole number (want the replicas to wait for, for example 1; 0 or empty: none)", envReplicas, v)
		}
		if n < 0 {
			return r, usagef("%s: %q must not be negative (0 or empty: no wait)", envReplicas, v)
		}
		r.Replicas = n
	}
	if v := strings.TrimSpace(getenv(envReplicaTimeout)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return r, usagef("%s: %q is not a duration (want for example 500ms or 2s)", envReplicaTimeout, v)
		}
		if d < time.Millisecond || d > defaults.MaxReplicaTimeout {
			return r, usagef("%s: %q must be between 1ms and %s", envReplicaTimeout, v, defaults.MaxReplicaTimeout)
		}
		if r.Replicas == 0 {
			return r, usagef("%s: %q applies only with %s above 0 (set it, or unset %s)", envReplicaTimeout, v, envReplicas, envReplicaTimeout)
		}
		r.Timeout = d
	}
	return r, nil
}

// apply copies the wait for replicas into cfg.
func (r replication) apply(cfg *worqr.Config) {
	cfg.Replicas, cfg.ReplicaTimeout = r.Replicas, r.Timeout
}

// workerConfigError names the variable behind a rejected timing.
func workerConfigError(err error) error {
	var ie *worqr.InvalidError
	if errors.As(err, &ie) {
		if env, ok := fieldEnv[ie.Field]; ok {
			return usagef("%s: %v", env, err)
		}
	}
	return err
}

// newLogger builds the zap logger of the binary, writing to w at the level
// WORQR_LOG_LEVEL names, and the slog logger the library gets through zapslog.
func newLogger(w io.Writer, getenv func(string) string) (*zap.Logger, *slog.Logger, error) {
	level := zapcore.InfoLevel
	switch v := strings.ToLower(strings.TrimSpace(getenv(envLogLevel))); v {
	case "", "info":
	case "debug":
		level = zapcore.DebugLevel
	case "warn":
		level = zapcore.WarnLevel
	case "error":
		level = zapcore.ErrorLevel
	default:
		return nil, nil, usagef("%s: %q is not a log level (want debug, info, warn or error)", envLogLevel, getenv(envLogLevel))
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeLevel = zapcore.CapitalLevelEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var ws zapcore.WriteSyncer
	if f, ok := w.(*os.File); ok {
		ws = zapcore.Lock(f)
	} else {
		ws = zapcore.Lock(zapcore.AddSync(w))
	}
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), ws, level)
	zl := zap.New(core)
	sl := slog.New(zapslog.NewHandler(core, zapslog.AddStacktraceAt(slog.LevelError+100)))
	return zl, sl, nil
}

// parseQueues splits a comma-separated list of queue names and checks each.
func parseQueues(flagName, list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, q := range strings.Split(list, ",") {
		q = strings.TrimSpace(q)
		if err := worqr.CheckQueueName(q); err != nil {
			if q == "" {
				return nil, usagef("%s %q: empty queue name (want a,b,c)", flagName, list)
			}
			return nil, usagef("%s: queue name %s", flagName, ruleOf(err))
		}
		if seen[q] {
			return nil, usagef("%s: queue %q is listed twice", flagName, q)
		}
		seen[q] = true
		out = append(out, q)
	}
	return out, nil
}

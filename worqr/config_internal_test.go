package worqr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"
)

const allowed = " (allowed: A-Z a-z 0-9 _ - .)"

// checkInvalid asserts that err is an *InvalidError matching ErrInvalid
// with exactly the message want.
func checkInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %q", want)
	}
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err.Error(), want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Errorf("%v is not an *InvalidError", err)
	} else if !strings.HasPrefix(want, "worqr: "+ie.Field+" ") {
		t.Errorf("InvalidError.Field = %q, not the field named in %q", ie.Field, want)
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name    string
		cfg     *Config
		want    Config       // Logger is checked apart
		logger  *slog.Logger // nil: any non-nil default
		wantErr string
	}{
		{
			name: "nil: every default",
			cfg:  nil,
			want: Config{Namespace: "worqr", MaxPayloadBytes: 1 << 20, EventInterval: 250 * time.Millisecond},
		},
		{
			name: "zero value: every default",
			cfg:  &Config{},
			want: Config{Namespace: defaults.Namespace, MaxPayloadBytes: defaultMaxPayloadBytes, EventInterval: defaults.EventInterval},
		},
		{
			name: "values given are kept",
			cfg: &Config{Namespace: "app-1.x_Y", MaxPayloadBytes: maxPayloadLimit, Logger: logger,
				EventInterval: time.Second, DisableEvents: true, EventLogLength: 500},
			want: Config{Namespace: "app-1.x_Y", MaxPayloadBytes: maxPayloadLimit,
				EventInterval: time.Second, DisableEvents: true, EventLogLength: 500},
			logger: logger,
		},
		{
			name:    "MaxPayloadBytes negative",
			cfg:     &Config{MaxPayloadBytes: -1},
			wantErr: "worqr: MaxPayloadBytes (-1) must be between 1 and 268435456",
		},
		{
			name:    "MaxPayloadBytes above the limit",
			cfg:     &Config{MaxPayloadBytes: maxPayloadLimit + 1},
			wantErr: "worqr: MaxPayloadBytes (268435457) must be between 1 and 268435456",
		},
		{
			name:    "Namespace with a forbidden character",
			cfg:     &Config{Namespace: "my:app"},
			wantErr: `worqr: Namespace "my:app" has forbidden character ':' at byte 2` + allowed,
		},
		{
			name:    "Namespace with a hash-tag brace",
			cfg:     &Config{Namespace: "{app}"},
			wantErr: `worqr: Namespace "{app}" has forbidden character '{' at byte 0` + allowed,
		},
		{
			name:    "EventInterval under defaults.MinInterval",
			cfg:     &Config{EventInterval: time.Millisecond},
			wantErr: "worqr: EventInterval (1ms) must be at least 10ms",
		},
		{
			name:    "EventLogLength negative",
			cfg:     &Config{EventLogLength: -1},
			wantErr: "worqr: EventLogLength (-1) must not be negative",
		},
		{
			name: "Replicas: ReplicaTimeout defaults to 1s",
			cfg:  &Config{Replicas: 1},
			want: Config{Namespace: defaults.Namespace, MaxPayloadBytes: defaultMaxPayloadBytes, EventInterval: defaults.EventInterval,
				Replicas: 1, ReplicaTimeout: defaults.ReplicaTimeout},
		},
		{
			name:    "Replicas negative",
			cfg:     &Config{Replicas: -1},
			wantErr: "worqr: Replicas (-1) must not be negative",
		},
		{
			name:    "ReplicaTimeout above the limit",
			cfg:     &Config{Replicas: 1, ReplicaTimeout: 5 * time.Second},
			wantErr: "worqr: ReplicaTimeout (5s) must be between 0 and 4s",
		},
		{
			name:    "ReplicaTimeout under a millisecond",
			cfg:     &Config{Replicas: 1, ReplicaTimeout: time.Microsecond},
			wantErr: "worqr: ReplicaTimeout (1µs) must be at least 1ms (WAIT counts whole milliseconds)",
		},
		{
			name:    "ReplicaTimeout without Replicas",
			cfg:     &Config{ReplicaTimeout: time.Second},
			wantErr: "worqr: ReplicaTimeout (1s) applies only with Replicas",
		},
		{
			name:    "Namespace too long",
			cfg:     &Config{Namespace: strings.Repeat("n", defaults.MaxNameLen+1)},
			wantErr: "worqr: Namespace is 101 bytes long (at most 100)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.cfg.withDefaults()
			if tc.wantErr != "" {
				checkInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.logger == nil && got.Logger == nil:
				t.Error("Logger default not filled")
			case tc.logger != nil && got.Logger != tc.logger:
				t.Errorf("Logger = %p, want the one given (%p)", got.Logger, tc.logger)
			}
			got.Logger = nil
			if got != tc.want {
				t.Errorf("withDefaults = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWorkerConfigWithDefaults(t *testing.T) {
	t.Parallel()
	type durations struct{ HeartbeatInterval, HeartbeatTTL, ReaperInterval, PollInterval time.Duration }
	tests := []struct {
		name    string
		cfg     *WorkerConfig
		want    durations
		wantErr string
	}{
		{
			name: "durations default",
			cfg:  worker(nil),
			want: durations{time.Second, 3 * time.Second, time.Second, time.Second},
		},
		{
			name: "durations given are kept",
			cfg: worker(func(c *WorkerConfig) {
				c.HeartbeatInterval = 100 * time.Millisecond
				c.HeartbeatTTL = 300 * time.Millisecond
				c.ReaperInterval = 200 * time.Millisecond
				c.PollInterval = 50 * time.Millisecond
			}),
			want: durations{100 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond, 50 * time.Millisecond},
		},
		{
			name: "TTL alone above the default interval",
			cfg:  worker(func(c *WorkerConfig) { c.HeartbeatTTL = 1500 * time.Millisecond }),
			want: durations{time.Second, 1500 * time.Millisecond, time.Second, time.Second},
		},
		{
			name: "smallest timings allowed",
			cfg: worker(func(c *WorkerConfig) {
				c.HeartbeatInterval = 10 * time.Millisecond
				c.HeartbeatTTL = 11 * time.Millisecond
				c.ReaperInterval = 10 * time.Millisecond
				c.PollInterval = 10 * time.Millisecond
			}),
			want: durations{10 * time.Millisecond, 11 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		},
		{
			name:    "nil",
			cfg:     nil,
			wantErr: "worqr: WorkerConfig is nil",
		},
		{
			name:    "no queues",
			cfg:     worker(func(c *WorkerConfig) { c.Queues = nil }),
			wantErr: "worqr: Queues is empty and there are no Flows: a worker needs at least one queue",
		},
		{
			name: "queue name with a space",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues = map[string]QueueConfig{"a b": {Handler: noop, Concurrency: 1}}
			}),
			wantErr: `worqr: Queues["a b"] "a b" has forbidden character ' ' at byte 1` + allowed,
		},
		{
			name: "empty queue name",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues = map[string]QueueConfig{"": {Handler: noop, Concurrency: 1}}
			}),
			wantErr: `worqr: Queues[""] is empty (want 1 to 100 characters of A-Z a-z 0-9 _ - .)`,
		},
		{
			name:    "nil handler",
			cfg:     worker(func(c *WorkerConfig) { c.Queues["q"] = QueueConfig{Concurrency: 1} }),
			wantErr: `worqr: Queues["q"].Handler is nil (set Handler, or BatchHandler with KeyBatch)`,
		},
		{
			name:    "negative concurrency",
			cfg:     worker(func(c *WorkerConfig) { c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: -3} }),
			wantErr: `worqr: Queues["q"].Concurrency (-3) must not be negative`,
		},
		{
			name: "TTL equal to the interval",
			cfg: worker(func(c *WorkerConfig) {
				c.HeartbeatInterval = time.Second
				c.HeartbeatTTL = time.Second
			}),
			wantErr: "worqr: HeartbeatTTL (1s) must be greater than HeartbeatInterval (1s)",
		},
		{
			name:    "TTL below the default interval",
			cfg:     worker(func(c *WorkerConfig) { c.HeartbeatTTL = 500 * time.Millisecond }),
			wantErr: "worqr: HeartbeatTTL (500ms) must be greater than HeartbeatInterval (1s)",
		},
		{
			name:    "interval above the default TTL",
			cfg:     worker(func(c *WorkerConfig) { c.HeartbeatInterval = 5 * time.Second }),
			wantErr: "worqr: HeartbeatTTL (3s) must be greater than HeartbeatInterval (5s)",
		},
		{
			name: "HeartbeatInterval below 10ms",
			cfg: worker(func(c *WorkerConfig) {
				c.HeartbeatInterval = time.Millisecond
				c.HeartbeatTTL = 5 * time.Millisecond
			}),
			wantErr: "worqr: HeartbeatInterval (1ms) must be at least 10ms",
		},
		{
			// Below about 1.2ms the reaper lease (nine tenths of the
			// interval, in whole ms) was 0, which Redis rejects: recovery
			// and the mover stopped without a word.
			name:    "ReaperInterval below 10ms",
			cfg:     worker(func(c *WorkerConfig) { c.ReaperInterval = time.Millisecond }),
			wantErr: "worqr: ReaperInterval (1ms) must be at least 10ms",
		},
		{
			name:    "PollInterval below 10ms",
			cfg:     worker(func(c *WorkerConfig) { c.PollInterval = 500 * time.Microsecond }),
			wantErr: "worqr: PollInterval (500µs) must be at least 10ms",
		},
		{
			name:    "negative HeartbeatInterval",
			cfg:     worker(func(c *WorkerConfig) { c.HeartbeatInterval = -time.Second }),
			wantErr: "worqr: HeartbeatInterval (-1s) must not be negative",
		},
		{
			name:    "negative HeartbeatTTL",
			cfg:     worker(func(c *WorkerConfig) { c.HeartbeatTTL = -time.Second }),
			wantErr: "worqr: HeartbeatTTL (-1s) must not be negative",
		},
		{
			name:    "negative ReaperInterval",
			cfg:     worker(func(c *WorkerConfig) { c.ReaperInterval = -time.Millisecond }),
			wantErr: "worqr: ReaperInterval (-1ms) must not be negative",
		},
		{
			name:    "negative PollInterval",
			cfg:     worker(func(c *WorkerConfig) { c.PollInterval = -time.Millisecond }),
			wantErr: "worqr: PollInterval (-1ms) must not be negative",
		},
		{
			name:    "embedded Config is checked",
			cfg:     worker(func(c *WorkerConfig) { c.MaxPayloadBytes = -5 }),
			wantErr: "worqr: MaxPayloadBytes (-5) must be between 1 and 268435456",
		},
		{
			name:    "shared concurrency without priority",
			cfg:     worker(func(c *WorkerConfig) { c.Concurrency = 4 }),
			wantErr: `worqr: Concurrency (4) applies only with Priority: set each QueueConfig.Concurrency`,
		},
		{
			name:    "priority with a negative shared concurrency",
			cfg:     worker(func(c *WorkerConfig) { c.Priority = PriorityWeighted; c.Concurrency = -1 }),
			wantErr: `worqr: Concurrency (-1) must not be negative`,
		},
		{
			name:    "unknown priority mode",
			cfg:     worker(func(c *WorkerConfig) { c.Priority = 7; c.Concurrency = 1 }),
			wantErr: `worqr: Priority (7) must be PriorityNone, PriorityWeighted or PriorityStrict`,
		},
		{
			name:    "weight without priority",
			cfg:     worker(func(c *WorkerConfig) { c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 1, Weight: 3} }),
			wantErr: `worqr: Queues["q"].Weight (3) applies only with WorkerConfig.Priority`,
		},
		{
			name: "negative weight",
			cfg: worker(func(c *WorkerConfig) {
				c.Priority, c.Concurrency = PriorityStrict, 2
				c.Queues["q"] = QueueConfig{Handler: noop, Weight: -1}
			}),
			wantErr: `worqr: Queues["q"].Weight (-1) must not be negative`,
		},
		{
			name: "rate without period",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 1, Limits: &Limits{Rate: 5}}
			}),
			wantErr: `worqr: Queues["q"].Limits.Period (0s) must be at least 1ms when Rate is set`,
		},
		{
			name: "period not in whole milliseconds",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 1, Limits: &Limits{Rate: 5, Period: 1999 * time.Microsecond}}
			}),
			wantErr: `worqr: Queues["q"].Limits.Period (1.999ms) must be a whole number of milliseconds`,
		},
		{
			name: "negative global concurrency",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 1, Limits: &Limits{Concurrency: -1}}
			}),
			wantErr: `worqr: Queues["q"].Limits.Concurrency (-1) must not be negative`,
		},
		{
			name: "KeyBatch without BatchHandler",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 1, KeyBatch: 5}
			}),
			wantErr: `worqr: Queues["q"].KeyBatch (5) needs a BatchHandler (a Handler runs one task at a time)`,
		},
		{
			name: "BatchHandler without KeyBatch",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{BatchHandler: noBatch, Concurrency: 1}
			}),
			wantErr: `worqr: Queues["q"].KeyBatch (0) must be between 1 and 1000 when BatchHandler is set`,
		},
		{
			name: "KeyBatch too large",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{BatchHandler: noBatch, Concurrency: 1, KeyBatch: 1001}
			}),
			wantErr: `worqr: Queues["q"].KeyBatch (1001) must be between 1 and 1000 with BatchHandler, or 0`,
		},
		{
			name: "negative KeyBatch",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{BatchHandler: noBatch, Concurrency: 1, KeyBatch: -1}
			}),
			wantErr: `worqr: Queues["q"].KeyBatch (-1) must be between 1 and 1000 with BatchHandler, or 0`,
		},
		{
			name: "Handler and BatchHandler",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{Handler: noop, BatchHandler: noBatch, Concurrency: 1, KeyBatch: 2}
			}),
			wantErr: `worqr: Queues["q"].Handler must be nil when BatchHandler is set (it runs every task of the queue)`,
		},
		{
			name: "batches on a flow's queue",
			cfg: worker(func(c *WorkerConfig) {
				c.Flows = []*Flow{{Name: "f", Stages: []Stage{{Name: "s1",
					Handler: StageHandlerFunc(func(context.Context, *Run) (*StageResult, error) { return nil, nil }),
					Queue:   QueueConfig{Concurrency: 1, KeyBatch: 3}}}}}
			}),
			wantErr: `worqr: Flow["f"].Stages[0].Queue.KeyBatch and BatchHandler apply only to stand-alone queues (WorkerConfig.Queues)`,
		},
		{
			name: "ReadAhead too large",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 1, ReadAhead: 1025}
			}),
			wantErr: `worqr: Queues["q"].ReadAhead (1025) must be at most 1024`,
		},
		{
			name: "ReadAhead with a BatchHandler",
			cfg: worker(func(c *WorkerConfig) {
				c.Queues["q"] = QueueConfig{BatchHandler: noBatch, Concurrency: 1, KeyBatch: 2, ReadAhead: 4}
			}),
			wantErr: `worqr: Queues["q"].ReadAhead (4) does not apply with BatchHandler`,
		},
		{
			name: "ReadAhead with Priority",
			cfg: worker(func(c *WorkerConfig) {
				c.Priority, c.Concurrency = PriorityWeighted, 4
				c.Queues["q"] = QueueConfig{Handler: noop, ReadAhead: 4}
			}),
			wantErr: `worqr: Queues["q"].ReadAhead (4) does not apply with WorkerConfig.Priority (queues that share slots)`,
		},
		{
			name: "ReadAhead on a flow's queue",
			cfg: worker(func(c *WorkerConfig) {
				c.Flows = []*Flow{{Name: "f", Stages: []Stage{{Name: "s1",
					Handler: StageHandlerFunc(func(context.Context, *Run) (*StageResult, error) { return nil, nil }),
					Queue:   QueueConfig{Concurrency: 1, ReadAhead: 3}}}}}
			}),
			wantErr: `worqr: Flow["f"].Stages[0].Queue.ReadAhead (3) applies only to stand-alone queues (WorkerConfig.Queues)`,
		},
		{
			name:    "embedded Config namespace is checked",
			cfg:     worker(func(c *WorkerConfig) { c.Namespace = "a/b" }),
			wantErr: `worqr: Namespace "a/b" has forbidden character '/' at byte 1` + allowed,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.cfg.withDefaults()
			if tc.wantErr != "" {
				checkInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := durations{got.HeartbeatInterval, got.HeartbeatTTL, got.ReaperInterval, got.PollInterval}
			if d != tc.want {
				t.Errorf("durations = %+v, want %+v", d, tc.want)
			}
			if got.Namespace != defaults.Namespace || got.MaxPayloadBytes != defaultMaxPayloadBytes || got.Logger == nil {
				t.Errorf("embedded Config defaults not filled: %+v", got.Config)
			}
			if q := got.Queues["q"]; len(got.Queues) != 1 || q.Concurrency != 2 || q.Handler == nil {
				t.Errorf("Queues = %+v, want q with its handler and concurrency 2", got.Queues)
			}
		})
	}
}

func TestDefaultConcurrency(t *testing.T) {
	t.Parallel()
	noop := HandlerFunc(func(context.Context, *Task) error { return nil })
	t.Run("a queue without one runs 10 at once", func(t *testing.T) {
		got, err := worker(func(c *WorkerConfig) { c.Queues["q"] = QueueConfig{Handler: noop} }).withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if n := got.Queues["q"].Concurrency; n != 10 {
			t.Fatalf("Concurrency = %d, want 10", n)
		}
	})
	t.Run("queues served by priority share 10 and keep no cap of their own", func(t *testing.T) {
		got, err := worker(func(c *WorkerConfig) {
			c.Priority = PriorityStrict
			c.Queues["q"] = QueueConfig{Handler: noop}
		}).withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got.Concurrency != 10 || got.Queues["q"].Concurrency != 0 {
			t.Fatalf("shared Concurrency = %d, queue's cap %d; want 10 and 0", got.Concurrency, got.Queues["q"].Concurrency)
		}
	})
	t.Run("a flow's stage and child queues without one run 10 at once", func(t *testing.T) {
		f := &Flow{Name: "f", Stages: []Stage{{Name: "s", Handler: StageHandlerFunc(func(context.Context, *Run) (*StageResult, error) { return nil, nil }),
			Children: map[string]QueueConfig{"c": {Handler: noop}}}}}
		got, err := validateFlows([]*Flow{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s := got[0].Stages[0]; s.Queue.Concurrency != 10 || s.Children["c"].Concurrency != 10 {
			t.Fatalf("stage Concurrency %d, child %d; want 10 and 10", s.Queue.Concurrency, s.Children["c"].Concurrency)
		}
	})
}

func TestWorkerConfigWithDefaultsWorksOnACopy(t *testing.T) {
	t.Parallel()
	cfg := worker(nil)
	got, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HeartbeatTTL != 0 || cfg.Namespace != "" || cfg.Logger != nil || cfg.MaxPayloadBytes != 0 {
		t.Errorf("withDefaults wrote defaults into the caller's config: %+v", cfg)
	}
	got.Queues["other"] = QueueConfig{Handler: noop, Concurrency: 1}
	if len(cfg.Queues) != 1 {
		t.Errorf("the validated config shares its Queues map with the caller's")
	}
}

// The queue-name rule, through CheckQueueName and through the Queues and
// Namespace fields, which share it.
func TestCheckQueueName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule string // "" when the name is valid
	}{
		{"q", ""},
		{"AZaz09_-.", ""},
		{strings.Repeat("x", 100), ""},
		{"", "is empty (want 1 to 100 characters of A-Z a-z 0-9 _ - .)"},
		{strings.Repeat("x", 101), "is 101 bytes long (at most 100)"},
		{"a{b", `"a{b" has forbidden character '{' at byte 1` + allowed},
		{"a}b", `"a}b" has forbidden character '}' at byte 1` + allowed},
		{"a:b", `"a:b" has forbidden character ':' at byte 1` + allowed},
		{"a b", `"a b" has forbidden character ' ' at byte 1` + allowed},
		{"a/b", `"a/b" has forbidden character '/' at byte 1` + allowed},
		{"a\tb", `"a\tb" has forbidden character '\t' at byte 1` + allowed},
		{"a\nb", `"a\nb" has forbidden character '\n' at byte 1` + allowed},
		{"qé", `"qé" has forbidden character 'é' at byte 1` + allowed},
		{"ab*", `"ab*" has forbidden character '*' at byte 2` + allowed},
	}
	for _, tc := range tests {
		err := CheckQueueName(tc.name)
		if tc.rule == "" {
			if err != nil {
				t.Errorf("CheckQueueName(%q) = %v, want nil", tc.name, err)
			}
		} else {
			t.Run("CheckQueueName/"+tc.name, func(t *testing.T) {
				checkInvalid(t, err, "worqr: queue name "+tc.rule)
			})
		}

		_, err = worker(func(c *WorkerConfig) {
			c.Queues = map[string]QueueConfig{tc.name: {Handler: noop, Concurrency: 1}}
		}).withDefaults()
		if tc.rule == "" {
			if err != nil {
				t.Errorf("queue %q rejected: %v", tc.name, err)
			}
		} else {
			t.Run("Queues/"+tc.name, func(t *testing.T) {
				checkInvalid(t, err, `worqr: Queues[`+strconv.Quote(tc.name)+`] `+tc.rule)
			})
		}

		if tc.name == "" { // an empty namespace means the default
			continue
		}
		_, err = (&Config{Namespace: tc.name}).withDefaults()
		if tc.rule == "" {
			if err != nil {
				t.Errorf("namespace %q rejected: %v", tc.name, err)
			}
		} else {
			t.Run("Namespace/"+tc.name, func(t *testing.T) {
				checkInvalid(t, err, "worqr: Namespace "+tc.rule)
			})
		}
	}
}

// A Concurrency with no bound is a channel and two goroutines per slot:
// 1,000,000 took 6.5 GB, and 1<<30 ended the process with "fatal error:
// runtime: out of memory" inside NewWorker (no panic a caller can
// recover). It is refused, naming the field and the bound.
func TestHugeConcurrencyIsRefused(t *testing.T) {
	t.Parallel()
	const big = 1 << 30
	stage := &Flow{Name: "f", Stages: []Stage{{Name: "s", Queue: QueueConfig{Concurrency: big},
		Handler: StageHandlerFunc(func(context.Context, *Run) (*StageResult, error) { return nil, nil })}}}
	for name, c := range map[string]struct {
		cfg   *WorkerConfig
		field string
	}{
		"queue": {worker(func(c *WorkerConfig) { c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: big} }), `Queues["q"].Concurrency`},
		"shared": {worker(func(c *WorkerConfig) {
			c.Priority, c.Concurrency = PriorityWeighted, big
			c.Queues["q"] = QueueConfig{Handler: noop}
		}), "Concurrency"},
		"stage": {&WorkerConfig{Flows: []*Flow{stage}}, "Concurrency"},
	} {
		_, err := c.cfg.withDefaults()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field+" (1073741824) must be at most ") {
			t.Errorf("%s: Concurrency %d: %v, want ErrInvalid naming %s and its bound", name, big, err, c.field)
		}
	}
	if _, err := worker(func(c *WorkerConfig) { c.Queues["q"] = QueueConfig{Handler: noop, Concurrency: 10_000} }).withDefaults(); err != nil {
		t.Errorf("Concurrency 10,000: %v, want it accepted", err)
	}
}

// FuzzCheckQueueName: a name is accepted exactly when it is 1 to defaults.MaxNameLen
// bytes of the allowed characters, and every rejection is an *InvalidError
// naming the field.
func FuzzCheckQueueName(f *testing.F) {
	for _, s := range []string{"", "emails", "a b", "a{b}", "a:b", "a/b", "é", strings.Repeat("x", 101), "ok.name-1_2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckQueueName(name)
		valid := len(name) >= 1 && len(name) <= defaults.MaxNameLen && strings.Trim(name,
			"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == ""
		if valid != (err == nil) {
			t.Fatalf("CheckQueueName(%q) = %v, want valid=%v", name, err, valid)
		}
		if err != nil {
			var ie *InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || ie.Field != "queue name" {
				t.Fatalf("CheckQueueName(%q): error %v is not an InvalidError on the queue name", name, err)
			}
		}
	})
}

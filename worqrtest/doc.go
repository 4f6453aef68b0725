// Package worqrtest tests code that enqueues worqr tasks and the handlers
// that run them, without a Redis to start or a worker to poll.
//
// An Env is one test's worqr: an in-process Redis (miniredis, which runs
// worqr's Lua scripts) or, with Options.RedisURL or WORQR_TEST_REDIS_URL, a
// real redis-server, in a namespace of the test's own:
//
//	env := worqrtest.New(t, nil)
//	signup(ctx, env.Client(), "ann@example.com") // the code under test
//	env.RequireEnqueued(t, "emails", worqrtest.Match{Type: "welcome"})
//
// Work runs one task through a handler as a Worker would, and returns how
// the engine ended it (done, retry at a time, dead, given back) with the
// attempt and deadline the handler saw. Drain runs a Worker until its
// queues (or flow runs) have nothing left to do now.
//
// # The clock
//
// On the in-process Redis, Redis's clock stands still: it starts at the
// wall clock's time and moves only when the test calls Advance. That clock
// is the one worqr compares every due time with (its scripts read Redis's
// TIME), so Advance(time.Hour) makes due, at once:
//
//   - delayed tasks (EnqueueOpts.Delay, At) and retries (Backoff,
//     RetryAfter, RateLimited): Advance moves them to their queues, as a
//     reaper would have;
//   - deadlines (EnqueueOpts.Deadline): a task taken after it ends expired;
//   - periodic ticks of the schedules registered in the namespace
//     (Scheduler.Register, or a Scheduler's Start): Advance fires each at
//     its time, in turn, as a Scheduler running throughout would have;
//   - key expiries: unique keys (UniqueTTL), idempotent ids (IDTTL),
//     retention, and keepalives (a Worker running across an Advance longer
//     than its HeartbeatTTL loses its keepalive, as a process frozen that
//     long would: Work and Drain run their Workers between Advances).
//
// It does not move Go timers nor the local clock: a handler's Timeout (its
// context's deadline is on the wall clock), a Worker's heartbeat, poll and
// reaper intervals, and a Scheduler's PollInterval keep wall time; the
// Client checks a Deadline against the local clock at enqueue, so after an
// Advance give deadlines from Env.Now. A real Redis keeps its own clock:
// Advance fails the test there (Options.InProcess keeps a test that moves
// the clock on the in-process Redis).
package worqrtest

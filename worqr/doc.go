// Package worqr runs background work on Redis with no broker: every process
// that embeds it is a peer.
//
// # Enqueueing
//
// A Client enqueues tasks (an opaque payload; worqr adds no envelope), one at
// a time or in batches (up to 1,000 tasks and 4 MiB in one atomic step, a
// larger batch in ordered steps), immediately or after a delay, optionally
// unique; it cancels them, waits for their end and starts flow runs. An
// Inspector reads and steers what is stored: tasks, queues, workers, runs,
// the dead set, pauses and limits.
//
// # Running workers
//
// A Worker is one registered process serving several queues, each with a
// Handler and a concurrency limit. Start registers it (a keepalive key renewed
// every HeartbeatInterval) and starts taking; it wakes on Redis pub/sub and
// polls as a fallback. Every worker also takes part in recovery: any peer may
// requeue, to the front of their queues, the tasks of a worker whose keepalive
// expired, within HeartbeatTTL + ReaperInterval (about 4 s by default). A
// queue whose handlers are fast also takes up to QueueConfig.ReadAhead tasks
// ahead of them, which wait for a handler in the order they were taken.
//
// # Priorities and limits
//
// A task may carry a priority level within its queue (EnqueueOpts.Priority):
// the highest level waiting is taken first, and a task put back goes to the
// front of its own level. A worker may share its slots among its queues by
// weight or in strict order (WorkerConfig.Priority, QueueConfig.Weight). A
// queue may have global limits, applied by the take script across every
// process (Limits: a rate per period on Redis's clock, a number running at
// once; Inspector.SetLimits); a handler may answer RateLimited to run again
// later without spending an attempt.
//
// # Stopping
//
// Stop stops taking, gives running handlers until its context ends, then puts
// what still runs back at the front of its queue, cancels those handlers and
// deregisters. The library never installs signal handlers.
//
// # Failure semantics
//
// Each taking of a task has exactly one owner; finishing checks ownership in
// the same script that records the outcome, so a worker that lost its
// keepalive cannot record anything (ErrTaskLost). After a failover (a
// redisconn.Sentinel or redisconn.Cluster switching servers) a worker cancels the
// handlers of takings the new primary does not hold (ErrLostInFailover):
// their take was acknowledged by the old primary and never replicated.
// Execution is at-least-once:
// after a crash, a lost keepalive or a failed attempt the handler runs again,
// so handlers must be idempotent. A handler's error is a failed attempt,
// retried with backoff up to MaxAttempts, then the task goes to the dead set;
// SkipRetry sends it there at once, RetryAfter picks the delay, ErrGiveBack
// puts it back at the front, a panic is a failed attempt (never a crash of the
// process), and a timeout cancels the handler's context and counts as a
// failed attempt. A task whose workers keep dying is buried after MaxCrashes.
// A task enqueued with a Deadline is not started after it (it ends as
// expired).
//
// A Scheduler enqueues periodic tasks (a cron expression or an interval):
// run one in any number of processes; each tick is enqueued once across
// them, on Redis's clock.
//
// # Remote workers
//
// Package remote serves queues to workers in other processes or languages
// (the gateway module puts it on gRPC and JSON), with the same outcome
// policy and take path as a Worker.
//
// docs/PROTOCOL.md in the repository describes every key and script.
package worqr

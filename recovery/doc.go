// Package recovery finds the takings of dead workers and puts them back at the
// front of their queues.
//
// Any peer may reap. A lease (SET NX PX, for one reaper interval) lets one
// peer reap per interval; if that peer dies, another takes the lease at the
// next interval. A pass:
//
//  1. reads the Workers set and all their keepalive keys in one MGET (a
//     missing key means dead forever: ids are never reused);
//  2. reads the queues each dead worker's registration recorded;
//  3. runs the requeue script for each of those queues: the dead workers'
//     takings go back to the front, oldest first, with a wake-up; it is
//     idempotent, so two reapers (or a reaper and a stopping worker) racing
//     are harmless;
//  4. removes the dead from the Workers set.
//
// A pass therefore costs two commands when nobody died, whatever the number
// of queues. It reaches every taking because a take carries the worker's
// deadline (heartbeat.Session.Until, before its keepalive can expire) and
// Redis refuses it once that has passed: after a pass saw a keepalive gone,
// no taking appears under that id. Sweep, run every SweepInterval, reads
// every known queue's holder index for holders that are neither registered
// nor alive (left by an older version, by hand, or by a Redis Cluster
// failover that lost a registration).
//
// The same loop runs the mover: under the same lease, each interval it moves
// due tasks of every known queue's scheduled set (delayed enqueues, retries)
// to the back of the queue, in atomic batches timed by Redis's clock, and
// trims dead sets by age. The move, the sweep and the prune of flow runs
// run beside the passes, each one at a time (a move calls a script per
// known queue, 16 calls to a round trip: long with tens of thousands of
// queues), so that no pass waits for them; the move starts before the
// pass. A delayed task is offered within one reaper interval after it is
// due. The lease, each call of a pass and each round trip of the mover
// are bounded (CallTimeout, 5 s): one whose reply never comes (a
// connection gone silent) fails that pass, or the move of that round
// trip's queues, once, and the next one goes on.
//
// Timing: kill -9 -> key expires within the heartbeat TTL (3 s) -> the next
// pass, within one reaper interval (1 s), requeues: about 4 s in the worst case.
package recovery

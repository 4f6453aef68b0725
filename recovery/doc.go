// Package recovery finds the takings of dead workers and puts them back at the
// front of their queues.
//
// Any peer may reap. A lease (SET NX PX, for one reaper interval) lets one
// peer reap per interval; if that peer dies, another takes the lease at the
// next interval. A pass:
//
//  1. reads the known queues and, for each, the index of workers that may hold
//     takings there, plus the Workers set;
//  2. reads all their keepalive keys in one MGET (a missing key means dead
//     forever: ids are never reused);
//  3. runs the requeue script for each queue with dead holders: their takings
//     go back to the front, oldest first, with a wake-up; it is idempotent,
//     so two reapers (or a reaper and a stopping worker) racing are harmless;
//  4. removes the dead from the Workers set.
//
// Because the holder index is written by the same script that takes a task, a
// worker that takes after its key expired and after a pass is found by the
// next pass: every taking stays reachable until it is finished or requeued.
//
// The same loop runs the mover: under the same lease, each interval it moves
// due tasks of every known queue's scheduled set (delayed enqueues, retries)
// to the back of the queue, in atomic batches timed by Redis's clock, and
// trims dead sets by age. A delayed task is offered within one reaper
// interval after it is due.
//
// Timing: kill -9 -> key expires within the heartbeat TTL (3 s) -> the next
// pass, within one reaper interval (1 s), requeues: about 4 s in the worst case.
package recovery

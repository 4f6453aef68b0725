// Package consumer is worqr's indexed consumer (after flow-go's jobqueue):
// it works jobs that a Source finds by a uint64 index (block heights, the
// offsets of a log), in index order, and keeps in Redis the processed
// index: every job below it is done. A restart resumes from it.
//
//	c, err := consumer.New(pool, &consumer.Config[Block]{
//		Name:    "blocks",
//		Source:  chain, // Head() and AtIndex(i)
//		Process: verify,
//		MaxProcessing:  8,  // jobs in flight, across every process
//		MaxSearchAhead: 64, // never past processed index + 64
//	})
//	err = c.Start(ctx)
//	...
//	c.Check() // when the source may have new jobs
//
// # How it works
//
// Each index in flight is a task of a worqr queue (QueueName(name); id and
// payload the index in decimal), so it is an ordinary taking: owned by one
// worker at a time, recovered by worqr's reaper within HeartbeatTTL +
// ReaperInterval when its process dies, retried with backoff when it fails.
// A check reads the Source's Head and runs one script that dispatches the
// next indexes (pushes their tasks) while index < processed +
// MaxSearchAhead and fewer than MaxProcessing are dispatched and not done.
// A job's run records it done in the consumer's set of finished indexes,
// only while the run still owns its taking, and moves the processed index
// over the finished indexes that follow it, in the same script. Both
// scripts run on the consumer's one hash tag, so any number of processes
// may run the same consumer: dispatch hands out each index once, and the
// processed index only moves up, over indexes recorded done.
//
// # Guarantees
//
//   - No gap: the processed index never passes a job that is not done.
//     A failed job is retried, with Backoff, for as long as it fails; it is
//     never skipped (SkipRetry is not honoured). A job whose runs killed
//     MaxCrashes processes is parked in the dead set of its queue, and
//     progress waits there until an operator requeues it.
//   - At-least-once: a job runs again when its process died (kill -9, lost
//     keepalive, Stop out of time) before its run recorded it done. A run
//     that finds its index already recorded returns without running it.
//     Process must be idempotent.
//   - One index is never run by two live processes at once: its task is
//     owned by one worker. A process frozen past its keepalive may still be
//     inside a job when another process starts it again; its context is
//     cancelled when it wakes, and its record is refused.
//   - MaxProcessing and MaxSearchAhead hold for all processes of the
//     consumer together; Concurrency bounds each process.
//
// Check coalesces: calls that come while a check waits are one check.
// Finishing a job checks again, and so does every CheckInterval.
//
// A cancelled index task, or one purged from the dead set, is dispatched
// again when it is the lowest unfinished index. The Redis layout is in
// docs/PROTOCOL.md ("Indexed consumers").
package consumer

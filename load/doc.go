// Package load enqueues a large input, one task per line, into a worqr
// queue: in chunks, each applied in one atomic step together with a
// checkpoint in Redis, so that a load stopped anywhere (an error, a kill,
// a lost reply) and run again with Resume enqueues each line exactly once.
// `worqr load` is its command line.
package load

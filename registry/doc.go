// Package registry keeps the cluster's view of its workers in Redis: the
// Workers set, one keepalive key per worker, the set of known queues and the
// reaper lease. All of its keys share the {reg} hash tag.
//
// A worker is alive exactly while its keepalive key exists. Keys are renewed
// with SET XX, so an expired key never comes back: a worker whose key expired
// must register again under a new id.
package registry

// Package heartbeat keeps a worker registered and alive in the registry, and
// says when it is not: Keeper is the keepalive's state machine.
//
// The life of a worker id (a Session):
//
//	Start: register(id1) --> alive --beat ok every Interval--> alive ...
//	                           |
//	                           +--key gone (SET XX found nothing), or no beat
//	                           |  succeeded for a whole TTL
//	                           v
//	                         lost: Session.Retire(ErrLost) cancels the
//	                         session's context (handlers stop), Lost() is true
//	                         for good: nothing may finish or give back under
//	                         id1 again; OnEvent(Lost)
//	                           |
//	                           v
//	                         register(id2), a NEW id (a lost id never comes
//	                         back), retried with capped backoff;
//	                         OnEvent(Registered); Current() returns it and its
//	                         old change channel is closed
//
// Fresh reports whether the last good beat was sent less than TTL - Interval
// ago: a process frozen (SIGSTOP, a long GC pause, a VM migration) or cut off
// for that long must not take new work before a beat says its id survived.
//
// Session.Until is the session's deadline on Redis's clock: the Redis time
// read before the keepalive was last set, plus TTL - TTL/10. A take carries
// it and Redis refuses the take at or past it, so nothing is ever taken
// under an id whose keepalive may be gone, however long the process was
// frozen between its Fresh check and its take.
//
// Timing: a worker beats every Interval (default 1 s) with a TTL (default 3
// s). After a kill -9 its key expires within TTL; a reaper pass runs at
// least every reaper interval (default 1 s), so its tasks are offered again
// within TTL + reaper interval (about 4 s by default; docs/RELIABILITY.md
// has the measured figures).
//
// A Lease is a session without a Keeper: its owner renews it by calling Beat
// (a remote worker's beats arrive over the network). The same rules hold: a
// lease not renewed for TTL - TTL/10 by the local clock, or whose key a beat
// found gone, is retired for good and never renewed again.
//
// The Keeper reads time through a Clock, so tests drive beats by advancing a
// manual clock instead of sleeping.
package heartbeat

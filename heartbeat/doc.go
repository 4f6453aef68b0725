// Package heartbeat keeps one worker id alive in the registry and says when it
// is not.
//
// The life of a worker id:
//
//	registered --beat ok--> alive --beat ok--> alive ...
//	                          |
//	                          +--key gone (SET XX found nothing), or no beat
//	                          |  succeeded for a whole TTL--> lost
//	                          v
//	                        lost: stop taking, cancel handlers, never finish or
//	                        give back anything under this id, register again
//	                        under a NEW id (a lost id never comes back)
//
// Timing: a worker beats every Interval (default 1 s) with a TTL (default 3 s).
// After a kill -9 its key expires within TTL; a reaper pass runs at least every
// reaper interval (default 1 s), so its tasks are offered again within
// TTL + reaper interval (about 4 s by default).
package heartbeat

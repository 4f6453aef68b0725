// Package startstop is the start/stop lifecycle shared by worqr's
// long-running types (Worker, Scheduler, remote.Server, consumer.Consumer), so
// that each of them follows the same rules without writing them again.
// River's startstop package gave the idea.
//
// A Machine moves through these states:
//
//	idle ──Start succeeds──▶ running ──Stop──▶ stopping ──stop returns──▶ stopped
//	idle ──Start fails─────▶ idle
//	idle ──Stop────────────▶ final (stopped before it was started)
//
// The rules, each one tested by its name in startstop_test.go:
//
//   - Start twice is an error: once a Start has succeeded, every later
//     Start returns "worqr: <what> already started", also after Stop.
//   - A Start that fails leaves the machine startable: the error of its
//     start function is returned as is, and a later Start may try again.
//   - A Stop before any successful Start is final: nothing runs, so there
//     is nothing to stop; Stop returns nil, Stopped is closed, and a later
//     Start is refused with "worqr: <what> stopped before it was started"
//     (a value started then would run with nobody left to stop it).
//   - Stop after Start runs its stop function once. Every other Stop,
//     concurrent or later, waits until that one has returned and returns
//     the same result. StopContext is the same with a bound on each
//     caller's wait: when its context ends first it returns ctx.Err(),
//     the stopping goes on, and a later call waits again.
//   - Stopped is closed once stopped: when the stop function has returned,
//     or when a Stop came before any Start. It is never closed otherwise.
//
// Start holds the machine's lock while its start function runs: a Stop
// that comes meanwhile waits, then stops what was started (or makes the
// machine final when the start failed). A start function must therefore
// not call Stop itself; a goroutine it starts may (a type that stops when
// the context given to Start ends does so). The stop function runs without
// the lock.
package startstop

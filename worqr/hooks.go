package worqr

import "sync/atomic"

// hook is a callback a test of this package sets on one Worker or
// Inspector, to act at a named point of a call under way (a peer's change
// between a read and a write, a reply on its way); unset outside tests.
// A test may set it while the instance runs: it is read atomically.
type hook[F any] struct{ f atomic.Pointer[F] }

// set makes f the hook's callback; undo removes it.
func (h *hook[F]) set(f F) (undo func()) {
	h.f.Store(&f)
	return func() { h.f.Store(nil) }
}

// get returns the callback, and whether one is set.
func (h *hook[F]) get() (F, bool) {
	if p := h.f.Load(); p != nil {
		return *p, true
	}
	var zero F
	return zero, false
}

// workerHooks are a Worker's test hooks.
type workerHooks struct {
	slotWait   hook[func(id string)]      // a taking of task id starts to wait for a slot
	beforeTake hook[func(q *queueRunner)] // q's fetch loop read its free slots and is about to take
	released   hook[func(q *queueRunner)] // q's release was answered; the hand-offs that waited for it are not launched yet
	confirmed  hook[func(q *queueRunner)] // confirmSwitch has a confirmed beat, before it clears q's need for one
}

// inspectorHooks are an Inspector's test hooks.
type inspectorHooks struct {
	runsPage        hook[func()]              // Runs is about to read a page after the first
	runsForget      hook[func(gone []string)] // Runs read a page and found gone; it has not dropped them yet
	cancelAllActive hook[func()]              // CancelAll passed over the waiting tasks; it has not read the running ones
	removeForgotten hook[func()]              // RemoveQueue forgot the queue; it has not checked it again
	resumeRead      hook[func(name string)]   // a resume read schedule name and its next tick; it has not written
}

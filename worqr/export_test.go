package worqr

import (
	"context"
	"time"
)

// Test seams: the scheduler's decisions at a Redis time the test chooses,
// so that schedule tests need not wait for real ticks.

// PassAt runs one scheduler pass as if Redis's clock read now.
func (s *Scheduler) PassAt(ctx context.Context, now time.Time) (int, error) {
	return s.pass(ctx, now.UnixMilli())
}

// RegisterAt registers sc as if Redis's clock read now.
func (s *Scheduler) RegisterAt(ctx context.Context, sc Schedule, now time.Time) error {
	return s.register(ctx, sc, now.UnixMilli())
}

// ResumeScheduleAt resumes schedule name as if Redis's clock read now.
func (in *Inspector) ResumeScheduleAt(ctx context.Context, name string, now time.Time) error {
	return in.resumeSchedule(ctx, name, now.UnixMilli())
}

// Zero reports whether o takes the plain enqueue path.
func (o *EnqueueOpts) Zero() bool { return o.zero() }

// Hand-off test helpers shared with the package's external tests.
var (
	StrandTaking = strandTaking
	WaitRan      = waitRan
)

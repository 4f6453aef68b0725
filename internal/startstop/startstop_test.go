package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func ok() error { return nil }

// isClosed reports whether c is closed now.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// blockingStop returns a stop function that counts its runs, tells
// entered when it runs and returns err once release is closed.
func blockingStop(err error) (stop func() error, entered, release chan struct{}, runs *atomic.Int32) {
	entered, release, runs = make(chan struct{}), make(chan struct{}), new(atomic.Int32)
	stop = func() error {
		runs.Add(1)
		close(entered)
		<-release
		return err
	}
	return stop, entered, release, runs
}

func TestMachine(t *testing.T) {
	t.Run("StartTwiceIsAnError", func(t *testing.T) {
		var m Machine
		if err := m.Start("worker", ok); err != nil {
			t.Fatalf("first Start = %v, want nil", err)
		}
		ran := false
		err := m.Start("worker", func() error { ran = true; return nil })
		if err == nil || err.Error() != "worqr: worker already started" {
			t.Fatalf("second Start = %v, want worqr: worker already started", err)
		}
		if ran {
			t.Error("the second Start ran its start function")
		}
	})

	t.Run("StartAfterStopIsAlreadyStarted", func(t *testing.T) {
		var m Machine
		if err := m.Start("scheduler", ok); err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(ok); err != nil {
			t.Fatal(err)
		}
		if err := m.Start("scheduler", ok); err == nil || err.Error() != "worqr: scheduler already started" {
			t.Fatalf("Start after Stop = %v, want worqr: scheduler already started", err)
		}
	})

	t.Run("StartThatFailsLeavesItStartable", func(t *testing.T) {
		var m Machine
		boom := errors.New("boom")
		if err := m.Start("remote", func() error { return boom }); err != boom {
			t.Fatalf("failing Start = %v, want its start function's error as is", err)
		}
		if m.Started() {
			t.Error("Started after a failed Start = true")
		}
		if isClosed(m.Stopped()) {
			t.Error("Stopped closed by a failed Start")
		}
		if err := m.Start("remote", ok); err != nil {
			t.Fatalf("Start after a failed Start = %v, want nil", err)
		}
		if !m.Started() {
			t.Error("Started after a successful Start = false")
		}
	})

	t.Run("StopBeforeStartIsFinal", func(t *testing.T) {
		var m Machine
		ran := false
		if err := m.Stop(func() error { ran = true; return errors.New("ran") }); err != nil {
			t.Fatalf("Stop before Start = %v, want nil", err)
		}
		if ran {
			t.Error("Stop before Start ran its stop function: nothing was started")
		}
		if err := m.Stop(ok); err != nil {
			t.Fatalf("second Stop before Start = %v, want nil", err)
		}
		if !isClosed(m.Stopped()) {
			t.Error("Stopped not closed after a Stop before Start")
		}
		started := false
		err := m.Start("consumer", func() error { started = true; return nil })
		if err == nil || err.Error() != "worqr: consumer stopped before it was started" {
			t.Fatalf("Start after Stop = %v, want worqr: consumer stopped before it was started", err)
		}
		if started || m.Started() {
			t.Error("a Start after a Stop before Start ran")
		}
	})

	t.Run("StopAfterFailedStartIsFinal", func(t *testing.T) {
		var m Machine
		_ = m.Start("worker", func() error { return errors.New("no redis") })
		if err := m.Stop(func() error { t.Error("stop ran after a failed Start"); return nil }); err != nil {
			t.Fatalf("Stop after a failed Start = %v, want nil", err)
		}
		if err := m.Start("worker", ok); err == nil || err.Error() != "worqr: worker stopped before it was started" {
			t.Fatalf("Start = %v, want worqr: worker stopped before it was started", err)
		}
	})

	t.Run("StopAfterStartRunsStopOnce", func(t *testing.T) {
		var m Machine
		if err := m.Start("worker", ok); err != nil {
			t.Fatal(err)
		}
		var runs int
		want := errors.New("grace ran out")
		if err := m.Stop(func() error { runs++; return want }); err != want {
			t.Fatalf("Stop = %v, want its stop function's result", err)
		}
		if err := m.Stop(func() error { runs++; return nil }); err != want {
			t.Fatalf("Stop again = %v, want the first Stop's result %v", err, want)
		}
		if runs != 1 {
			t.Errorf("stop ran %d times, want 1", runs)
		}
	})

	t.Run("SecondStopWaitsForTheFirstAndReturnsItsResult", func(t *testing.T) {
		var m Machine
		if err := m.Start("worker", ok); err != nil {
			t.Fatal(err)
		}
		want := errors.New("first")
		stop, entered, release, runs := blockingStop(want)
		first := make(chan error, 1)
		go func() { first <- m.Stop(stop) }()
		<-entered
		const n = 8
		others := make(chan error, n)
		for i := 0; i < n; i++ {
			go func() { others <- m.Stop(func() error { runs.Add(1); return nil }) }()
		}
		select {
		case err := <-others:
			t.Fatalf("a second Stop returned %v while the first was stopping", err)
		default:
		}
		close(release)
		if err := <-first; err != want {
			t.Fatalf("first Stop = %v, want %v", err, want)
		}
		for i := 0; i < n; i++ {
			if err := <-others; err != want {
				t.Errorf("other Stop = %v, want the first's %v", err, want)
			}
		}
		if r := runs.Load(); r != 1 {
			t.Errorf("stop ran %d times, want 1", r)
		}
	})

	t.Run("StoppedIsClosedOnceStopped", func(t *testing.T) {
		var m Machine
		stoppedEarly := m.Stopped() // taken before Start: the same channel
		if isClosed(stoppedEarly) {
			t.Fatal("Stopped closed before Start")
		}
		if err := m.Start("worker", ok); err != nil {
			t.Fatal(err)
		}
		if isClosed(m.Stopped()) {
			t.Fatal("Stopped closed while running")
		}
		stop, entered, release, _ := blockingStop(nil)
		done := make(chan error, 1)
		go func() { done <- m.Stop(stop) }()
		<-entered
		if isClosed(m.Stopped()) {
			t.Fatal("Stopped closed while the stop function runs")
		}
		close(release)
		<-done
		if !isClosed(stoppedEarly) || !isClosed(m.Stopped()) {
			t.Fatal("Stopped not closed after Stop returned")
		}
	})

	// Start holds the lock while its start function runs: a Stop that comes
	// meanwhile stops what it started rather than find the machine idle
	// (and make it final while it runs).
	t.Run("StopDuringStartStopsWhatWasStarted", func(t *testing.T) {
		var m Machine
		inStart, release := make(chan struct{}), make(chan struct{})
		startErr := make(chan error, 1)
		go func() {
			startErr <- m.Start("worker", func() error {
				close(inStart)
				<-release
				return nil
			})
		}()
		<-inStart
		var stops atomic.Int32
		stopErr := make(chan error, 1)
		go func() { stopErr <- m.Stop(func() error { stops.Add(1); return nil }) }()
		close(release)
		if err := <-startErr; err != nil {
			t.Fatal(err)
		}
		if err := <-stopErr; err != nil {
			t.Fatal(err)
		}
		if stops.Load() != 1 {
			t.Error("a Stop that came during Start did not stop what the Start started")
		}
	})

	t.Run("StopDuringFailingStartIsFinal", func(t *testing.T) {
		var m Machine
		inStart, release := make(chan struct{}), make(chan struct{})
		startErr := make(chan error, 1)
		go func() {
			startErr <- m.Start("worker", func() error {
				close(inStart)
				<-release
				return errors.New("no redis")
			})
		}()
		<-inStart
		stopErr := make(chan error, 1)
		go func() { stopErr <- m.Stop(func() error { t.Error("stop ran after a failed Start"); return nil }) }()
		close(release)
		if err := <-startErr; err == nil {
			t.Fatal("failing Start = nil")
		}
		if err := <-stopErr; err != nil {
			t.Fatal(err)
		}
		if !isClosed(m.Stopped()) {
			t.Error("Stopped not closed")
		}
	})

	t.Run("StopContextReturnsCtxErrAndTheStoppingGoesOn", func(t *testing.T) {
		var m Machine
		if err := m.Start("scheduler", ok); err != nil {
			t.Fatal(err)
		}
		stop, entered, release, runs := blockingStop(nil)
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { res <- m.StopContext(ctx, stop) }()
		<-entered
		cancel()
		if err := <-res; err != context.Canceled {
			t.Fatalf("StopContext = %v, want context.Canceled", err)
		}
		if isClosed(m.Stopped()) {
			t.Fatal("Stopped closed while the stop function runs")
		}
		// Called again, it keeps waiting for the same stop.
		again := make(chan error, 1)
		go func() { again <- m.StopContext(context.Background(), stop) }()
		close(release)
		if err := <-again; err != nil {
			t.Fatalf("StopContext again = %v, want nil", err)
		}
		<-m.Stopped()
		if r := runs.Load(); r != 1 {
			t.Errorf("stop ran %d times, want 1", r)
		}
	})

	t.Run("StopContextAfterStoppedReturnsTheResultWhateverCtx", func(t *testing.T) {
		var m Machine
		if err := m.Start("scheduler", ok); err != nil {
			t.Fatal(err)
		}
		want := errors.New("stopped")
		if err := m.Stop(func() error { return want }); err != want {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for i := 0; i < 100; i++ {
			if err := m.StopContext(ctx, ok); err != want {
				t.Fatalf("StopContext after stopped = %v, want %v", err, want)
			}
		}
	})

	t.Run("StopContextBeforeStartIsFinal", func(t *testing.T) {
		var m Machine
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := m.StopContext(ctx, func() error { t.Error("stop ran"); return nil }); err != nil {
			t.Fatalf("StopContext before Start = %v, want nil even with an ended ctx", err)
		}
		if !isClosed(m.Stopped()) {
			t.Error("Stopped not closed")
		}
		if err := m.Start("scheduler", ok); err == nil {
			t.Error("Start after StopContext before Start = nil")
		}
	})

	t.Run("ConcurrentStartsStartOnce", func(t *testing.T) {
		var m Machine
		var starts atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- m.Start("worker", func() error { starts.Add(1); return nil })
			}()
		}
		wg.Wait()
		close(errs)
		nils := 0
		for err := range errs {
			if err == nil {
				nils++
			}
		}
		if nils != 1 || starts.Load() != 1 {
			t.Errorf("%d Starts succeeded and %d start functions ran, want 1 and 1", nils, starts.Load())
		}
	})
}

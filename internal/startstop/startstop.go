package startstop

import (
	"context"
	"fmt"
	"sync"
)

type state int

const (
	idle     state = iota // never started, or every Start failed
	running               // a Start succeeded, no Stop yet
	stopping              // the stop function runs
	stopped               // the stop function has returned
	final                 // Stop came before any Start
)

// Machine is the lifecycle of one long-running value. The zero value is
// idle and ready to use; a Machine must not be copied after first use.
type Machine struct {
	mu      sync.Mutex
	state   state
	stopErr error // the stop function's result, set before done is closed

	// doneMu guards done, made on first use; not mu, which a Start holds
	// while its start function runs (Stopped does not wait for it).
	doneMu sync.Mutex
	done   chan struct{} // closed once stopped (see Stopped)
}

// Start runs start unless the machine was started or stopped before, and
// marks it running when start returns nil. what names the value in the
// errors ("worker" gives "worqr: worker already started").
func (m *Machine) Start(what string, start func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state {
	case idle:
	case final:
		return fmt.Errorf("worqr: %s stopped before it was started", what)
	default:
		return fmt.Errorf("worqr: %s already started", what)
	}
	if err := start(); err != nil {
		return err
	}
	m.state = running
	return nil
}

// Stop stops the machine. Before any successful Start it runs nothing,
// makes the machine final and returns nil. After Start, the first call
// runs stop and returns its result; other calls wait for that one and
// return the same result. Stopped is closed when stop has returned.
//
// Stop suits a value whose stop function bounds itself (a Worker's stop
// takes the grace context and, once it ends, stops hard).
func (m *Machine) Stop(stop func() error) error {
	if !m.begin() {
		<-m.stoppedCh()
		return m.stopErr // written before the close that was received
	}
	return m.run(stop)
}

// StopContext is Stop for a value whose stop function cannot be cut
// short (it waits for a loop that was told to end). The first call after
// Start runs stop in a goroutine of its own; each call waits for it until
// ctx ends, and then returns ctx.Err() while the stopping goes on (call
// again to keep waiting). Once stop has returned, every call returns its
// result, whatever ctx. Before any successful Start, it behaves as Stop.
func (m *Machine) StopContext(ctx context.Context, stop func() error) error {
	if m.begin() {
		go func() { _ = m.run(stop) }() // its result is kept in stopErr
	}
	select {
	case <-m.stoppedCh():
		return m.stopErr
	default:
	}
	select {
	case <-m.stoppedCh():
		return m.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin reports whether the caller is the one Stop that runs the stop
// function (the machine is then stopping). Otherwise the machine is
// stopped, or being stopped by another call: the caller waits for
// Stopped. A Stop before any Start makes the machine final here.
func (m *Machine) begin() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state {
	case idle:
		m.state = final
		close(m.stoppedCh())
		return false
	case running:
		m.state = stopping
		return true
	}
	return false
}

// run runs stop, records its result and closes Stopped.
func (m *Machine) run(stop func() error) error {
	err := stop()
	m.mu.Lock()
	m.state = stopped
	m.stopErr = err
	m.mu.Unlock()
	close(m.stoppedCh())
	return err
}

// Stopped returns a channel closed once the machine is stopped: the stop
// function of the first Stop after Start has returned, or a Stop came
// before any Start. It does not wait for a Start in progress.
func (m *Machine) Stopped() <-chan struct{} { return m.stoppedCh() }

// Started reports whether a Start has succeeded, whether or not the
// machine has been stopped since. It waits for a Start in progress.
func (m *Machine) Started() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state == running || m.state == stopping || m.state == stopped
}

func (m *Machine) stoppedCh() chan struct{} {
	m.doneMu.Lock()
	defer m.doneMu.Unlock()
	if m.done == nil {
		m.done = make(chan struct{})
	}
	return m.done
}

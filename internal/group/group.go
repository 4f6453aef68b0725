// Package group coalesces concurrent calls into batches (group commit): each
// caller hands in one item and gets back its own result or error, while the
// items of callers that arrive together travel in one batch, one round trip.
//
// There is no background goroutine and no timer: a caller that finds fewer
// than MaxInFlight batches in flight yields once (so that callers already
// runnable can join) and runs a batch itself, made of every item waiting, its
// own included; a caller that finds them all busy waits, and is either served
// by a later batch or handed the lead to run one.
package group

import (
	"context"
	"runtime"
	"sync"
)

// Group batches calls of one kind. The zero value is not usable: set Run.
type Group[T, R any] struct {
	// Run executes one batch and returns one result per item (or an error
	// for the whole batch). It must not keep items after it returns.
	Run func(ctx context.Context, items []T) ([]R, error)
	// MaxBatch caps a batch's size (default 128).
	MaxBatch int
	// MaxInFlight caps the batches running at once (default 4).
	MaxInFlight int
	// Weight, when set, weighs an item, and a batch's items weigh at most
	// MaxWeight together (a batch always takes its first item, whatever it
	// weighs). Nil: only MaxBatch counts.
	Weight    func(T) int
	MaxWeight int

	mu       sync.Mutex
	pending  []*call[T, R]
	inFlight int
}

type call[T, R any] struct {
	item T
	res  R
	err  error
	done chan struct{} // closed when res/err are set
	lead chan struct{} // signalled when this caller must run a batch
	// led is true from the moment a lead is handed to this caller until it
	// takes it up (guarded by Group.mu); a lead is never handed twice.
	led bool
}

// Call adds item to the next batch and returns its result. ctx bounds the wait;
// as with any call over the network, a caller that gives up while its item
// runs cannot know whether it was applied. A caller that gives up while its
// item still waits is removed: that item is never run.
func (g *Group[T, R]) Call(ctx context.Context, item T) (R, error) {
	c := &call[T, R]{item: item, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	if g.inFlight < g.maxInFlight() {
		g.inFlight++
		c.led = true
		c.lead <- struct{}{}
	}
	g.mu.Unlock()
	for {
		select {
		case <-c.lead:
			g.lead(ctx, c)
		case <-c.done:
			g.mu.Lock()
			if c.led { // handed a lead it will not take up: pass it on
				<-c.lead
				c.led = false
				g.passLead()
			}
			g.mu.Unlock()
			return c.res, c.err
		case <-ctx.Done():
			if g.abandon(c) {
				var zero R
				return zero, ctx.Err()
			}
			ctx = context.WithoutCancel(ctx) // already in a running batch: wait for it
		}
	}
}

// Waiting returns how many calls wait for a batch (not yet in one).
func (g *Group[T, R]) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// abandon removes a waiting caller whose context ended. It reports false when
// the call is already part of a batch.
func (g *Group[T, R]) abandon(c *call[T, R]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, p := range g.pending {
		if p != c {
			continue
		}
		g.pending = append(g.pending[:i:i], g.pending[i+1:]...)
		if c.led {
			<-c.lead
			c.led = false
			g.passLead()
		}
		return true
	}
	return false
}

// lead runs one batch for caller c, which holds a lead, then passes the lead
// on or gives it up.
func (g *Group[T, R]) lead(ctx context.Context, c *call[T, R]) {
	runtime.Gosched() // let callers that are about to arrive join this batch
	g.mu.Lock()
	c.led = false
	batch := g.take()
	g.mu.Unlock()
	if len(batch) > 0 {
		g.run(ctx, batch)
	}
	g.mu.Lock()
	g.passLead()
	g.mu.Unlock()
}

// passLead hands a lead to the oldest waiting caller without one, or gives it
// up. Called with g.mu held.
func (g *Group[T, R]) passLead() {
	for _, p := range g.pending {
		if !p.led {
			p.led = true
			p.lead <- struct{}{}
			return
		}
	}
	g.inFlight--
}

func (g *Group[T, R]) take() []*call[T, R] {
	n := min(len(g.pending), g.maxBatch())
	if g.Weight != nil {
		w := 0
		for i, c := range g.pending[:n] {
			w += g.Weight(c.item)
			if i > 0 && w > g.MaxWeight {
				n = i
				break
			}
		}
	}
	batch := g.pending[:n:n]
	g.pending = append([]*call[T, R](nil), g.pending[n:]...)
	return batch
}

func (g *Group[T, R]) run(ctx context.Context, batch []*call[T, R]) {
	items := make([]T, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	// The batch carries other callers' items: it must not die with this
	// caller's context alone.
	res, err := g.Run(context.WithoutCancel(ctx), items)
	for i, c := range batch {
		switch {
		case err != nil:
			c.err = err
		case i < len(res):
			c.res = res[i]
		}
		close(c.done)
	}
}

func (g *Group[T, R]) maxBatch() int {
	if g.MaxBatch > 0 {
		return g.MaxBatch
	}
	return 128
}

func (g *Group[T, R]) maxInFlight() int {
	if g.MaxInFlight > 0 {
		return g.MaxInFlight
	}
	return 4
}

package rdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

const pubsubPing = 2 * time.Second

// Listen opens a connection and subscribes it to channels, then calls
// onMessage for each message until ctx ends (it then returns nil)
// or the connection fails (it returns the error). onReady runs once every
// subscription is confirmed. It pings every pubsubPing so that a silently
// dead connection is noticed within three pings.
//
// On a single Redis (or a Sentinel's primary) it is one SUBSCRIBE
// connection. On a Redis Cluster whose pool is a ShardedPubSub, the wake
// and cancel channels (they carry their queue's tag, and the scripts
// SPUBLISH on them) are listened to with SSUBSCRIBE, on one connection per
// master that serves one of their slots; the events channel stays on a
// plain SUBSCRIBE connection (PUBLISH is broadcast to every node, and the
// events are batched, not per task). Channels whose slot no master serves
// (a master down for good, with cluster-require-full-coverage no) are left
// out meanwhile: the others are listened to (onReady runs once they are
// confirmed) and Listen ends, to be called again, once the slot map names
// a master for one of them. Messages are handed to onMessage one
// at a time. It returns an error as soon as one connection ends, after
// reading the slot map again when a slot may have moved (the node sent
// SUNSUBSCRIBE, refused a channel with MOVED, or the map read since then
// puts a channel on another master): the caller listens again, on the new
// topology, and polls, since what was published meanwhile is gone. On a
// cluster whose pool is only a TagConnGetter, PUBLISH is broadcast, so the
// one connection (on the first channel's node) hears every channel.
func (s *Store) Listen(ctx context.Context, channels []string, onReady func(), onMessage func(channel string, data []byte)) error {
	if len(channels) == 0 {
		return nil
	}
	if s.shard != nil {
		return s.listenSharded(ctx, channels, onReady, onMessage)
	}
	c, err := s.conn(ctx, HashTag(channels[0]))
	if err != nil {
		return err
	}
	defer c.Close()
	chs := make([]any, len(channels))
	for i, ch := range channels {
		chs[i] = ch
	}
	return listen(ctx, c, chs, onReady, onMessage)
}

// publish is the command that publishes on a wake or cancel channel from
// outside a script: SPUBLISH on a cluster (as the sharded scripts do), else
// PUBLISH.
func (s *Store) publish() string {
	if s.shard != nil {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// ErrShardMoved is returned by Listen on a Redis Cluster when a listened
// channel's slot moved to another master (or the node refused it).
var ErrShardMoved = errors.New("rdb: a sharded channel's slot moved")

// listenSharded is Listen on a ShardedPubSub pool.
func (s *Store) listenSharded(ctx context.Context, channels []string, onReady func(), onMessage func(string, []byte)) error {
	var plain []string
	byMaster := map[string][]string{}
	var masters []string
	var unserved []string // channels whose slot no master serves now
	refreshed := false
	for _, ch := range channels {
		if ch == s.keys.Events() {
			plain = append(plain, ch)
			continue
		}
		tag := HashTag(ch)
		addr := s.shard.MasterOf(tag)
		if addr == "" && !refreshed {
			refreshed = true
			if err := s.shard.Refresh(ctx); err != nil {
				return err
			}
			addr = s.shard.MasterOf(tag)
		}
		if addr == "" {
			unserved = append(unserved, ch)
			continue
		}
		if byMaster[addr] == nil {
			masters = append(masters, addr)
		}
		byMaster[addr] = append(byMaster[addr], ch)
	}
	if len(masters) == 0 && len(plain) == 0 {
		return fmt.Errorf("rdb: no master serves the slot of %s", unserved[0])
	}
	groups := len(masters)
	if len(plain) > 0 {
		groups++
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ready atomic.Int32
	groupReady := func() {
		if int(ready.Add(1)) == groups && onReady != nil {
			onReady()
		}
	}
	var msgMu sync.Mutex // one message at a time, as on one connection
	deliver := func(ch string, data []byte) {
		msgMu.Lock()
		defer msgMu.Unlock()
		onMessage(ch, data)
	}
	errs := make(chan error, groups+1)
	var wg sync.WaitGroup
	if len(unserved) > 0 {
		// A master down for good (cluster-require-full-coverage no): the
		// channels of the others are listened to meanwhile, and the
		// Listen ends, to listen again to all, once the map names a
		// master for one of these.
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.awaitServed(lctx, unserved)
		}()
	}
	wg.Add(groups)
	for _, addr := range masters {
		go func(addr string, chs []string) {
			defer wg.Done()
			errs <- s.listenShard(lctx, addr, chs, groupReady, deliver)
		}(addr, byMaster[addr])
	}
	if len(plain) > 0 {
		go func() {
			defer wg.Done()
			c, err := s.conn(lctx, RegistryTag)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			chs := make([]any, len(plain))
			for i, ch := range plain {
				chs[i] = ch
			}
			errs <- listen(lctx, c, chs, groupReady, deliver)
		}()
	}
	err := <-errs // the first connection to end ends them all
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("rdb: unsubscribed")
	}
	// A node that failed or moved a slot: read the map before the caller
	// listens again.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_ = s.shard.Refresh(rctx)
	rcancel()
	return err
}

// unservedCheck is how often a Listen that left out channels whose slot
// no master served looks at the slot map again (read every tenth time).
const unservedCheck = 500 * time.Millisecond

// awaitServed returns ErrShardMoved once the slot map names a master for
// one of channels (nil when ctx ends).
func (s *Store) awaitServed(ctx context.Context, channels []string) error {
	t := time.NewTicker(unservedCheck)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n%10 == 0 {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = s.shard.Refresh(rctx)
			cancel()
		}
		for _, ch := range channels {
			if s.shard.MasterOf(HashTag(ch)) != "" {
				return fmt.Errorf("%w: a master serves %s again", ErrShardMoved, ch)
			}
		}
	}
}

// listenShard listens to channels (all served by the master at addr) with
// SSUBSCRIBE on a connection of its own, one SSUBSCRIBE per hash tag (the
// channels of one command must share a slot).
func (s *Store) listenShard(ctx context.Context, addr string, channels []string, onReady func(), onMessage func(string, []byte)) error {
	c, err := s.shard.DialMaster(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	byTag := map[string][]any{}
	var tags []string
	for _, ch := range channels {
		tag := HashTag(ch)
		if byTag[tag] == nil {
			tags = append(tags, tag)
		}
		byTag[tag] = append(byTag[tag], ch)
	}
	for _, tag := range tags {
		if err := c.Send("SSUBSCRIBE", byTag[tag]...); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return err
	}
	// stale: the map read since puts one of the channels on another master
	// (a failover, or a slot move whose SUNSUBSCRIBE this node did not send).
	stale := func() bool {
		for _, tag := range tags {
			if a := s.shard.MasterOf(tag); a != "" && a != addr {
				return true
			}
		}
		return false
	}
	stop := pinger(ctx, c, func() error {
		if err := c.Send("SUNSUBSCRIBE"); err != nil {
			return err
		}
		return c.Flush()
	})
	defer stop()
	confirmed := 0
	for {
		r, err := redis.ReceiveWithTimeout(c, 3*pubsubPing)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if IsReplyError(err) { // MOVED: the map was stale
				return fmt.Errorf("%w: %s: %v", ErrShardMoved, addr, err)
			}
			return err
		}
		v, _ := redis.Values(r, nil)
		if len(v) < 2 {
			continue
		}
		kind, _ := redis.String(v[0], nil)
		switch kind {
		case "smessage":
			if len(v) == 3 {
				ch, _ := redis.String(v[1], nil)
				data, _ := redis.Bytes(v[2], nil)
				onMessage(ch, data)
			}
		case "ssubscribe":
			if confirmed++; confirmed == len(channels) && onReady != nil {
				onReady()
			}
		case "sunsubscribe":
			if ctx.Err() == nil {
				// The node no longer serves the slot (moved or lost).
				ch, _ := redis.String(v[1], nil)
				return fmt.Errorf("%w: %s unsubscribed %s", ErrShardMoved, addr, ch)
			}
			if n, _ := redis.Int(v[len(v)-1], nil); n == 0 {
				return nil
			}
		}
		if ctx.Err() == nil && stale() {
			return fmt.Errorf("%w: the slot map moved a channel off %s", ErrShardMoved, addr)
		}
	}
}

// pinger starts c's only writer from here on: a PING every pubsubPing, and
// unsubscribe when ctx ends (which ends the caller's receive loop). stop
// waits for it to end, after which the caller may close c. redigo forbids
// closing c from another goroutine, so it never does.
func pinger(ctx context.Context, c redis.Conn, unsubscribe func() error) (stop func()) {
	done := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		t := time.NewTicker(pubsubPing)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				_ = unsubscribe()
				return
			case <-done:
				return
			case <-t.C:
				if c.Send("PING", "") != nil || c.Flush() != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-writerDone
	}
}

// listen runs Listen on c. It never closes c from another goroutine (redigo
// forbids it): on ctx's end it unsubscribes, which ends the receive loop.
func listen(ctx context.Context, c redis.Conn, channels []any, onReady func(), onMessage func(channel string, data []byte)) error {
	psc := redis.PubSubConn{Conn: c}
	if err := psc.Subscribe(channels...); err != nil {
		return err
	}
	done := make(chan struct{})
	writerDone := make(chan struct{})
	defer func() {
		close(done)
		<-writerDone // the caller may close c once the writer is gone
	}()
	go func() { // the connection's only writer from here on
		defer close(writerDone)
		t := time.NewTicker(pubsubPing)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				_ = psc.Unsubscribe()
				return
			case <-done:
				return
			case <-t.C:
				if psc.Ping("") != nil {
					return
				}
			}
		}
	}()
	confirmed := 0
	for {
		switch v := psc.ReceiveWithTimeout(3 * pubsubPing).(type) {
		case redis.Message:
			onMessage(v.Channel, v.Data)
		case redis.Subscription:
			switch {
			case v.Kind == "subscribe":
				confirmed++
				if confirmed == len(channels) && onReady != nil {
					onReady()
				}
			case v.Kind == "unsubscribe" && v.Count == 0:
				return nil
			}
		case error:
			if ctx.Err() != nil {
				return nil
			}
			return v
		}
	}
}

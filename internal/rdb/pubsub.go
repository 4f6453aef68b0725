package rdb

import (
	"context"
	"time"

	"github.com/gomodule/redigo/redis"
)

const pubsubPing = 2 * time.Second

// Listen opens a connection and subscribes it to channels, then calls
// onMessage for each message until ctx ends (it then returns nil)
// or the connection fails (it returns the error). onReady runs once every
// subscription is confirmed. It pings every pubsubPing so that a silently
// dead connection is noticed within three pings. The connection is the one
// of the first channel's tag: on a Redis Cluster plain pub/sub is broadcast
// to every node, so it hears the channels of every tag.
func (s *Store) Listen(ctx context.Context, channels []string, onReady func(), onMessage func(channel string, data []byte)) error {
	if len(channels) == 0 {
		return nil
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

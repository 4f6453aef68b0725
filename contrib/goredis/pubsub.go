package goredis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsubSend runs a subscription's command: the first SUBSCRIBE or
// SSUBSCRIBE opens the go-redis PubSub (a connection of its own, outside
// the pool), later ones add channels; UNSUBSCRIBE, SUNSUBSCRIBE and PING
// are written at once (Flush has nothing left to send). Only the first
// subscription's goroutine and one other (worqr's pinger) use it at once:
// go-redis's PubSub lets one goroutine write while another receives.
func (c *conn) pubsubSend(cmd string, a []any) error {
	chs := make([]string, len(a))
	for i, x := range a {
		chs[i] = fmt.Sprint(x)
		if b, ok := x.([]byte); ok {
			chs[i] = string(b)
		}
	}
	ctx := context.Background()
	switch strings.ToUpper(cmd) {
	case "SUBSCRIBE", "SSUBSCRIBE":
		sharded := strings.EqualFold(cmd, "SSUBSCRIBE")
		if c.ps == nil {
			var ps *redis.PubSub
			if sharded {
				ps = c.ssubs.SSubscribe(ctx, chs...)
			} else {
				ps = c.subs.Subscribe(ctx, chs...)
			}
			if c.sc != nil { // commands before the subscription: done
				_ = c.sc.Close()
				c.sc = nil
			}
			c.ps, c.sharded = ps, sharded
			return nil
		}
		if sharded {
			return c.ps.SSubscribe(ctx, chs...)
		}
		return c.ps.Subscribe(ctx, chs...)
	case "UNSUBSCRIBE":
		return c.ps.Unsubscribe(ctx, chs...)
	case "SUNSUBSCRIBE":
		return c.ps.SUnsubscribe(ctx, chs...)
	case "PING":
		return c.ps.Ping(ctx, chs...)
	}
	return errSubscribed
}

// pubsubReceive returns the subscription's next message as redigo reads
// it: ["message"|"smessage", channel, data], [kind, channel, count] for a
// (un)subscription, ["pong", data]. timeout 0 waits as long as ctx.
func (c *conn) pubsubReceive(ctx context.Context, timeout time.Duration) (any, error) {
	m, err := c.ps.ReceiveTimeout(ctx, timeout)
	if err != nil {
		return nil, replyErr(err)
	}
	switch m := m.(type) {
	case *redis.Message:
		kind := "message"
		if c.sharded {
			kind = "smessage"
		}
		if m.Pattern != "" {
			return []any{[]byte("pmessage"), []byte(m.Pattern), []byte(m.Channel), []byte(m.Payload)}, nil
		}
		return []any{[]byte(kind), []byte(m.Channel), []byte(m.Payload)}, nil
	case *redis.Subscription:
		var ch any
		if m.Channel != "" {
			ch = []byte(m.Channel)
		}
		return []any{[]byte(m.Kind), ch, int64(m.Count)}, nil
	case *redis.Pong:
		return []any{[]byte("pong"), []byte(m.Payload)}, nil
	}
	return nil, fmt.Errorf("goredis: unexpected pub/sub message %T", m)
}

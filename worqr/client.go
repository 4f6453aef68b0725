package worqr

import (
	"context"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
)

// ConnGetter is satisfied by *redis.Pool. worqr never closes it.
type ConnGetter = rdb.ConnGetter

// Client enqueues, cancels and inspects tasks. It is safe for concurrent use.
type Client struct {
	pool ConnGetter
	cfg  Config
	keys rdb.Keys
}

// NewClient returns a client on pool. A nil cfg means all defaults.
func NewClient(pool ConnGetter, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{pool: pool, cfg: c, keys: rdb.NewKeys(c.Namespace)}, nil
}

// EnqueueOpts are per-call options of Enqueue and EnqueueBatch. A nil pointer
// means the defaults.
type EnqueueOpts struct{}

func (c *Client) queue(name string) (rdb.QueueKeys, error) {
	if err := CheckQueueName(name); err != nil {
		return rdb.QueueKeys{}, err
	}
	return c.keys.Queue(rdb.Standalone(name)), nil
}

func (c *Client) conn(ctx context.Context) (redis.Conn, error) {
	return c.pool.GetContext(ctx)
}

// Enqueue adds a task at the back of queue and wakes a worker. It returns the
// new task's id.
func (c *Client) Enqueue(ctx context.Context, queue string, payload []byte, opts *EnqueueOpts) (string, error) {
	ids, err := c.enqueue(ctx, queue, [][]byte{payload}, "payload")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// EnqueueBatch adds tasks at the back of queue, in order, in one atomic step
// and one round trip, and returns their ids in the same order. Either all
// are enqueued or none.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, payloads [][]byte, opts *EnqueueOpts) ([]string, error) {
	if len(payloads) == 0 {
		return nil, invalid("payloads", "is empty")
	}
	return c.enqueue(ctx, queue, payloads, "payloads[%d]")
}

func (c *Client) enqueue(ctx context.Context, queue string, payloads [][]byte, field string) ([]string, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return nil, err
	}
	for i, p := range payloads {
		if len(p) > c.cfg.MaxPayloadBytes {
			name := field
			if len(payloads) > 1 || field != "payload" {
				name = fmt.Sprintf(field, i)
			}
			return nil, invalid(name, "is %d bytes, over MaxPayloadBytes (%d)", len(p), c.cfg.MaxPayloadBytes)
		}
	}
	ids := make([]string, len(payloads))
	for i := range ids {
		ids[i] = xid.New().String()
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
	}
	defer conn.Close()
	if err := rdb.Enqueue(ctx, conn, qk, ids, payloads); err != nil {
		return nil, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
	}
	return ids, nil
}

// CancelStatus says what Cancel did.
type CancelStatus int

// The results of Cancel.
const (
	// CancelNotFound: no such task waiting or running (unknown, already
	// finished, or its cancel was already asked). Nothing changed.
	CancelNotFound CancelStatus = iota
	// CancelRemoved: the task was waiting; it is gone and no worker gets it.
	CancelRemoved
	// CancelRequested: the task is running; its owner's handler context is
	// cancelled and the taking ends as cancelled, not requeued.
	CancelRequested
)

func (s CancelStatus) String() string {
	switch s {
	case CancelRemoved:
		return "removed"
	case CancelRequested:
		return "requested"
	}
	return "not_found"
}

// Cancel stops task id of queue: a waiting task is removed; a running task's
// owner is told to stop and its taking ends as cancelled (even if the owner
// missed the message: its finish sees the mark). Cancelling an unknown or
// finished task is a no-op and not an error.
func (c *Client) Cancel(ctx context.Context, queue, id string) (CancelStatus, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return CancelNotFound, err
	}
	if id == "" {
		return CancelNotFound, invalid("id", "is empty")
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return CancelNotFound, fmt.Errorf("worqr: cancel %s: %w", id, err)
	}
	defer conn.Close()
	res, err := rdb.Cancel(ctx, conn, qk, id)
	if err != nil {
		return CancelNotFound, fmt.Errorf("worqr: cancel %s: %w", id, err)
	}
	return CancelStatus(res), nil
}

// Len returns the number of tasks waiting in queue.
func (c *Client) Len(ctx context.Context, queue string) (int, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return 0, err
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return redis.Int(redis.DoContext(conn, ctx, "LLEN", qk.Waiting))
}

// Peek returns up to n tasks from the front of queue (the next to be taken
// first), without taking them.
func (c *Client) Peek(ctx context.Context, queue string, n int) ([]*TaskInfo, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, invalid("n", "(%d) must be at least 1", n)
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ids, err := redis.Strings(redis.DoContext(conn, ctx, "LRANGE", qk.Waiting, 0, n-1))
	if err != nil {
		return nil, err
	}
	out := make([]*TaskInfo, 0, len(ids))
	for _, id := range ids {
		info, err := c.info(ctx, conn, qk, id)
		if err == ErrTaskNotFound {
			continue // finished or cancelled between the two reads
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Task returns what Redis holds about task id of queue, or ErrTaskNotFound.
func (c *Client) Task(ctx context.Context, queue, id string) (*TaskInfo, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return nil, err
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return c.info(ctx, conn, qk, id)
}

func (c *Client) info(ctx context.Context, conn redis.Conn, qk rdb.QueueKeys, id string) (*TaskInfo, error) {
	m, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", qk.Task(id)))
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, ErrTaskNotFound
	}
	info := &TaskInfo{
		ID:              id,
		Queue:           qk.Ref.Name,
		Payload:         []byte(m["d"]),
		State:           StateQueued,
		WorkerID:        m["w"],
		PID:             m["p"],
		CancelRequested: m["x"] != "",
	}
	if m["s"] == "active" {
		info.State = StateActive
	}
	info.Attempt, _ = strconv.Atoi(m["n"])
	info.Crashes, _ = strconv.Atoi(m["c"])
	if x, err := xid.FromString(id); err == nil {
		info.EnqueuedAt = x.Time()
	}
	return info, nil
}

// SubscribeCancels delivers the ids of running tasks of queue whose cancel is
// asked from now on, until ctx ends (then the channel is closed). Pub/sub is
// fire-and-forget: ids published while the subscription is reconnecting are
// missed. The subscription holds one connection of the pool.
func (c *Client) SubscribeCancels(ctx context.Context, queue string) (<-chan string, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return nil, err
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	psc := redis.PubSubConn{Conn: conn}
	if err := psc.Subscribe(qk.CancelChannel); err != nil {
		conn.Close()
		return nil, err
	}
	// Wait for the confirmation so that no cancel published after this
	// returns is missed.
	for {
		switch v := psc.ReceiveContext(ctx).(type) {
		case redis.Subscription:
			goto subscribed
		case error:
			conn.Close()
			return nil, v
		}
	}
subscribed:
	out := make(chan string, 64)
	go func() {
		defer close(out)
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		defer conn.Close()
		for {
			switch v := psc.Receive().(type) {
			case redis.Message:
				select {
				case out <- string(v.Data):
				case <-ctx.Done():
					return
				}
			case error:
				return
			}
		}
	}()
	return out, nil
}

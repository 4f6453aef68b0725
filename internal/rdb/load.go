package rdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// MaxLoadChunk is the most tasks one chunk of a bulk load writes, so that
// one script call never holds Redis for long.
const MaxLoadChunk = 2000

// LoadChunk is a run of input lines of a bulk load: lines First up to (not
// including) After, and the tasks made from them (lines without a task, such
// as empty ones, are counted but have none).
type LoadChunk struct {
	First, After int64
	IDs          []string
	Payloads     [][]byte
	// Tail identifies line After-1 (a digest of it): a resumed load checks
	// that its input has the same line there.
	Tail string
}

// LoadArgs are the settings of every chunk of one load.
type LoadArgs struct {
	// Name identifies the load; its checkpoint is LoadPrefix + Name.
	Name string
	// Fingerprint identifies the input (a digest of its first line): a
	// chunk of another input under the same name is refused
	// (LoadOtherInput).
	Fingerprint string
	// MaxWaiting > 0: a chunk is refused (LoadFull) while the queue holds at
	// least this many waiting tasks.
	MaxWaiting int
	// TTLMillis is how long the checkpoint outlives the last chunk.
	TTLMillis int64
}

// LoadStatus says what became of one chunk.
type LoadStatus int

// What became of a chunk.
const (
	LoadApplied    LoadStatus = 1  // written; Value: the checkpoint's next line
	LoadSeen       LoadStatus = 0  // written before; nothing written now
	LoadGap        LoadStatus = -1 // the checkpoint is at Value, not at the chunk's first line
	LoadFull       LoadStatus = -2 // Value tasks are waiting, at least MaxWaiting
	LoadOtherInput LoadStatus = -3 // another input was loaded under this name
	LoadIDExists   LoadStatus = -4 // a loaded task with id ID is waiting already
)

// LoadReply is the answer about one chunk.
type LoadReply struct {
	Status LoadStatus
	Value  int64
	ID     string
}

// LoadCheckpoint is where a load stands.
type LoadCheckpoint struct {
	Next        int64 // the next input line to load (1-based)
	Tasks       int64 // tasks enqueued so far
	Fingerprint string
	Tail        string // LoadChunk.Tail of the last chunk
	AtMillis    int64  // Redis time of the last chunk
}

// LoadState returns the checkpoint of load name on queue q, or nil when
// there is none.
func (s *Store) LoadState(ctx context.Context, q QueueKeys, name string) (*LoadCheckpoint, error) {
	var cp *LoadCheckpoint
	err := s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		vals, err := redis.Values(do(ctx, c, "HMGET", q.LoadPrefix+name, "next", "tasks", "fp", "at", "tail"))
		if err != nil {
			return err
		}
		if vals[0] == nil {
			return nil
		}
		cp = &LoadCheckpoint{}
		cp.Next, _ = redis.Int64(vals[0], nil)
		cp.Tasks, _ = redis.Int64(vals[1], nil)
		cp.Fingerprint, _ = redis.String(vals[2], nil)
		cp.AtMillis, _ = redis.Int64(vals[3], nil)
		cp.Tail, _ = redis.String(vals[4], nil)
		return nil
	})
	return cp, err
}

// LoadRun draws the number of a new run of a bulk load on q's tag (1, 2,
// ...): the ids a run makes carry it, so no two runs make the same id.
func (s *Store) LoadRun(ctx context.Context, q QueueKeys) (int64, error) {
	return redis.Int64(s.cmd(ctx, q.Ref.Tag, "INCR", q.LoadRuns))
}

// DeleteLoadState forgets the checkpoint of load name (the tasks stay).
func (s *Store) DeleteLoadState(ctx context.Context, q QueueKeys, name string) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		_, err := do(ctx, c, "DEL", q.LoadPrefix+name)
		return err
	})
}

func loadArgs(q QueueKeys, a *LoadArgs, ch *LoadChunk) []any {
	n := len(ch.IDs)
	args := make([]any, 0, 14+2*n)
	args = append(args, 0, q.Waiting, q.LoadPrefix+a.Name)
	args = appendPackedKeys(args, q, ch.IDs)
	args[0] = len(args) - 1
	args = append(args, q.WakeChannel, ch.First, ch.After, a.Fingerprint, a.MaxWaiting, a.TTLMillis, ch.Tail, q.TaskPrefix)
	for _, id := range ch.IDs {
		args = append(args, id)
	}
	for _, p := range ch.Payloads {
		args = append(args, p)
	}
	return args
}

// packedPart is the part of id that names its packed hash (see
// QueueKeys.Packed).
func packedPart(id string) string {
	if n := len(id); n > 3 {
		return id[:n-3]
	}
	return ""
}

// appendPackedKeys appends the packed hashes of ids to args, each once, in
// order of first use: a script that writes tasks packed declares them, as
// every key a caller can name (most runs of consecutive xids touch one or
// two).
func appendPackedKeys(args []any, q QueueKeys, ids []string) []any {
	var seen map[string]bool
	last := "\x00"
	for _, id := range ids {
		p := packedPart(id)
		if p == last || seen[p] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[p], last = true, p
		args = append(args, q.PackedPrefix+p)
	}
	return args
}

func loadReply(r any, err error) (LoadReply, error) {
	vals, err := redis.Values(r, err)
	if err != nil {
		return LoadReply{}, err
	}
	if len(vals) == 0 {
		return LoadReply{}, errors.New("rdb: load: empty reply")
	}
	st, err := redis.Int(vals[0], nil)
	if err != nil {
		return LoadReply{}, fmt.Errorf("rdb: load: %w", err)
	}
	rep := LoadReply{Status: LoadStatus(st)}
	if len(vals) > 1 {
		if rep.Status == LoadIDExists {
			rep.ID, _ = redis.String(vals[1], nil)
		} else {
			rep.Value, _ = redis.Int64(vals[1], nil)
		}
	}
	return rep, nil
}

func checkChunk(ch *LoadChunk) error {
	if len(ch.IDs) != len(ch.Payloads) {
		return fmt.Errorf("rdb: load: %d ids for %d payloads", len(ch.IDs), len(ch.Payloads))
	}
	if len(ch.IDs) > MaxLoadChunk {
		return fmt.Errorf("rdb: load: %d tasks in one chunk (at most %d)", len(ch.IDs), MaxLoadChunk)
	}
	if ch.First < 1 || ch.After <= ch.First {
		return fmt.Errorf("rdb: load: lines %d to %d: not a run of lines", ch.First, ch.After)
	}
	return nil
}

// LoadChunk applies one chunk and waits for the answer. It also finds out
// how scripts run on this server and loads them where missing, so a load
// sends its first chunk this way before pipelining the others.
func (s *Store) LoadChunk(ctx context.Context, q QueueKeys, a *LoadArgs, ch *LoadChunk) (LoadReply, error) {
	if err := checkChunk(ch); err != nil {
		return LoadReply{}, err
	}
	return loadReply(s.eval(ctx, q.Ref.Tag, loadScript, loadArgs(q, a, ch)...))
}

// LoadPipe sends the chunks of one load on one connection without waiting
// for each answer: Push queues a chunk, Answer returns the answer of the
// oldest chunk not yet answered (flushing first). Answers come in the order
// of sending. After an error the pipe is broken: close it and open another.
type LoadPipe struct {
	s    *Store
	q    QueueKeys
	a    *LoadArgs
	c    redis.Conn
	ctx  context.Context
	sent int
}

// OpenLoadPipe opens a pipe for the chunks of one load.
func (s *Store) OpenLoadPipe(ctx context.Context, q QueueKeys, a *LoadArgs) (*LoadPipe, error) {
	c, err := s.conn(ctx, q.Ref.Tag)
	if err != nil {
		return nil, err
	}
	return &LoadPipe{s: s, q: q, a: a, c: c, ctx: ctx}, nil
}

// Push queues ch.
func (p *LoadPipe) Push(ch *LoadChunk) error {
	if err := checkChunk(ch); err != nil {
		return err
	}
	cmd, args := loadScript.command(p.s.mode.Load(), p.s.tagged, loadArgs(p.q, p.a, ch))
	if err := p.c.Send(cmd, args...); err != nil {
		return err
	}
	p.sent++
	return nil
}

// Pending is how many chunks were sent and not yet answered.
func (p *LoadPipe) Pending() int { return p.sent }

// Answer flushes what was pushed and returns the oldest unanswered chunk's
// answer.
func (p *LoadPipe) Answer() (LoadReply, error) {
	if p.sent == 0 {
		return LoadReply{}, errors.New("rdb: load: nothing sent")
	}
	if err := p.c.Flush(); err != nil {
		return LoadReply{}, err
	}
	p.sent--
	return loadReply(redis.ReceiveContext(p.c, p.ctx))
}

// Close closes the pipe's connection.
func (p *LoadPipe) Close() error { return p.c.Close() }

package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/link"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// Format says how Run reads its input's lines.
type Format string

// The input formats of Run.
const (
	// Raw makes each line a task's payload as it is.
	Raw Format = "raw"
	// JSONLines makes each line a task's payload and refuses a line that
	// is not one JSON value.
	JSONLines Format = "jsonl"
)

// Limits and defaults of Run.
const (
	// DefaultChunk is how many tasks one chunk of a load writes: about
	// 1 ms of Redis time for 100-byte payloads.
	DefaultChunk = 250
	// DefaultWindow is how many chunks travel at once.
	DefaultWindow = 16
	// DefaultCheckpointTTL is how long a load's checkpoint outlives its
	// last chunk.
	DefaultCheckpointTTL = 7 * 24 * time.Hour
	// loadMaxLines bounds the lines of one chunk (blank lines make none of
	// its tasks), so that progress is saved often.
	loadMaxLines = 100_000
)

// Options are the settings of Run.
type Options struct {
	// Name identifies the load (same rules as queue names): its checkpoint
	// in Redis is kept under the queue and this name. Required.
	Name string
	// Format is Raw (default) or JSONLines.
	Format Format
	// Resume continues the load Name from its checkpoint: the lines it
	// already enqueued are read and skipped. Without Resume, a load whose
	// checkpoint exists is refused (ErrExists), so that a load is never
	// started twice by mistake; with Resume, a load with no checkpoint is
	// refused (ErrNotFound), so that a resume under another name (a
	// typo, a name made from an input changed since) does not start the
	// input over.
	Resume bool
	// MaxWaiting > 0 stops feeding while the queue holds at least this many
	// waiting tasks, and goes on as workers drain it: Redis then holds at
	// most about MaxWaiting + Chunk*Window tasks of this queue.
	MaxWaiting int
	// Chunk is how many tasks one atomic step writes (default
	// DefaultChunk, at most 2,000).
	Chunk int
	// Window is how many chunks are on the wire at once, 1 to 64 (default
	// DefaultWindow).
	Window int
	// CheckpointTTL is how long the checkpoint outlives the last chunk
	// (default DefaultCheckpointTTL): within it, Resume finds it.
	CheckpointTTL time.Duration
	// Progress, when set, is called after each chunk is applied and while
	// the load waits for the queue to drain. It runs on the loading
	// goroutine: keep it quick.
	Progress func(Progress)
}

// Progress is how far a load went.
type Progress struct {
	// Lines is the number of input lines read (with those skipped).
	Lines int64
	// Bytes is the number of input bytes read.
	Bytes int64
	// Enqueued is the number of tasks this call enqueued.
	Enqueued int64
	// Resumed is the number of lines a resumed load skipped because an
	// earlier run had loaded them.
	Resumed int64
	// Empty is the number of blank lines, which make no task.
	Empty int64
	// Checkpointed is true once the load has a checkpoint in Redis: a
	// chunk was applied, by this call or by one before it (a chunk of
	// blank lines too). Then Run continues only with Resume; before, only
	// without it.
	Checkpointed bool
	// Waiting is true while the load waits for the queue to drain
	// (MaxWaiting).
	Waiting bool
}

// ErrExists is returned by Run without Resume when the load's
// checkpoint exists.
var ErrExists = errors.New("worqr: load already started")

// ErrNotFound is returned by Run with Resume when the load has no
// checkpoint: it never started, or its checkpoint expired
// (Options.CheckpointTTL after its last chunk).
var ErrNotFound = errors.New("worqr: no load to resume")

// Error is returned by Run when it stops: Progress says how far it
// went; every line before Progress.Lines-(unsent lines) is enqueued exactly
// once, and Run with Resume continues from the checkpoint.
type Error struct {
	Progress Progress
	// Line is the input line at fault, 0 when the error is not about a line.
	Line int64
	Err  error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("worqr: load: line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("worqr: load: %v", e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Run enqueues one task per non-blank line of r at the back of queue, in
// chunks of atomic steps, each applied together with a checkpoint in Redis:
// however often a chunk is sent (a lost reply) and however a load ends (an
// error, a kill), Run with Resume and the same input enqueues each line
// exactly once. Task ids are made of the chunk's time, a number drawn for
// the run and the line number. The tasks wait packed, many to a Redis hash,
// until they are taken (see docs/PROTOCOL.md, "Bulk loads"). A load does
// not publish per-task events.
//
// When ctx ends, Run sends no more chunks but still reads the answers about
// those on the wire (for up to 5 s), so that the progress it returns with
// ctx's error counts every task enqueued.
//
// It returns the progress made; on failure ErrExists (wrapped, with
// where the load stands), ErrNotFound (wrapped) or a *Error
// (wrapping an *InvalidError for a bad line, or the Redis error).
func Run(ctx context.Context, c *worqr.Client, queue string, r io.Reader, opts *Options) (Progress, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := checkName("Name", o.Name); err != nil {
		return Progress{}, err
	}
	switch o.Format {
	case "":
		o.Format = Raw
	case Raw, JSONLines:
	default:
		return Progress{}, invalid("Format", "%q is not %q or %q", o.Format, Raw, JSONLines)
	}
	switch {
	case o.Chunk == 0:
		o.Chunk = DefaultChunk
	case o.Chunk < 0 || o.Chunk > rdb.MaxLoadChunk:
		return Progress{}, invalid("Chunk", "%d is not within 1..%d", o.Chunk, rdb.MaxLoadChunk)
	}
	switch {
	case o.Window == 0:
		o.Window = DefaultWindow
	case o.Window < 0 || o.Window > 64:
		return Progress{}, invalid("Window", "%d is not within 1..64", o.Window)
	}
	if o.MaxWaiting < 0 {
		return Progress{}, invalid("MaxWaiting", "%d is negative", o.MaxWaiting)
	}
	switch {
	case o.CheckpointTTL == 0:
		o.CheckpointTTL = DefaultCheckpointTTL
	case o.CheckpointTTL < time.Second:
		return Progress{}, invalid("CheckpointTTL", "%s is under 1s", o.CheckpointTTL)
	}
	t, err := target(c, queue)
	if err != nil {
		return Progress{}, err
	}
	l := &loader{st: t.Store, q: t.QK, maxPayload: t.MaxPayload, enqueued: t.Enqueued, queue: queue, o: o, ctx: ctx}
	l.args = rdb.LoadArgs{Name: o.Name, MaxWaiting: o.MaxWaiting, TTLMillis: o.CheckpointTTL.Milliseconds()}
	cp, err := l.st.LoadState(ctx, l.q, o.Name)
	if err != nil {
		return Progress{}, &Error{Err: err}
	}
	l.next = 1
	if cp != nil {
		if !o.Resume {
			return Progress{}, fmt.Errorf("%w: %q is at line %d with %d tasks enqueued: resume it or choose another name",
				ErrExists, o.Name, cp.Next, cp.Tasks)
		}
		l.cp, l.next = cp, cp.Next
		l.p.Checkpointed = true
	} else if o.Resume {
		return Progress{}, fmt.Errorf("%w: %q has no checkpoint in %s (it never started, or its checkpoint expired): nothing was enqueued",
			ErrNotFound, o.Name, queue)
	}
	l.start = l.next
	run, err := l.st.LoadRun(ctx, l.q)
	if err != nil {
		return Progress{}, &Error{Err: err}
	}
	l.run3 = [3]byte{byte(run >> 16), byte(run >> 8), byte(run)}
	if err := t.MarkKnown(ctx); err != nil {
		return Progress{}, &Error{Err: err}
	}
	l.scan = bufio.NewScanner(r)
	l.scan.Buffer(make([]byte, 0, 64<<10), l.maxPayload+2)
	err = l.run()
	if err != nil {
		var le *Error
		if errors.As(err, &le) {
			le.Progress = l.p
			return l.p, le
		}
		return l.p, &Error{Progress: l.p, Err: err}
	}
	return l.p, nil
}

// loader is one Run.
type loader struct {
	st         *rdb.Store
	q          rdb.QueueKeys
	maxPayload int
	enqueued   func(n int) // reports an EventEnqueued
	queue      string
	o          Options
	ctx        context.Context
	args       rdb.LoadArgs
	run3       [3]byte // the run's number (rdb.Store.LoadRun), its low 3 bytes
	scan       *bufio.Scanner
	line       int64 // lines read
	next       int64 // the checkpoint's next line, as last known
	start      int64 // the checkpoint's next line when this run began
	eof        bool
	stop       error               // what ended the input early (a bad line), once its lines before are loaded
	cp         *rdb.LoadCheckpoint // what an earlier run loaded, nil for a new load
	p          Progress
	// pending are the chunks sent (or to send again), oldest first.
	pending []*rdb.LoadChunk
	// unsure are the chunks sent on a connection that broke before their
	// answer came: Redis may have applied them. Only such a chunk found
	// applied (LoadSeen, or behind the checkpoint) was applied by this run;
	// any other was applied by another loader of the same name.
	unsure map[*rdb.LoadChunk]bool
}

// markUnsure notes that the answers about the pending chunks are lost.
func (l *loader) markUnsure() {
	if l.unsure == nil {
		l.unsure = map[*rdb.LoadChunk]bool{}
	}
	for _, ch := range l.pending {
		l.unsure[ch] = true
	}
}

// errOtherLoader says that chunk ch was applied by another run.
func (l *loader) errOtherLoader(ch *rdb.LoadChunk) error {
	return fmt.Errorf("lines %d to %d of load %q were enqueued by another run while this one was sending them: is another loader running under this name?",
		ch.First, ch.After-1, l.o.Name)
}

// read returns the next chunk of the input, or nil at its end. Lines before
// l.next were loaded by an earlier run: they are read and skipped, and the
// last of them must be the line that run loaded last. A bad line ends the
// input: the chunk stops before it, and run returns l.stop once the lines
// before it are loaded.
func (l *loader) read() (*rdb.LoadChunk, error) {
	if l.eof {
		return nil, nil
	}
	ch := &rdb.LoadChunk{First: l.line + 1}
	var secs [4]byte
	binary.BigEndian.PutUint32(secs[:], uint32(time.Now().Unix()))
	size := 0
	var last []byte
	for len(ch.IDs) < l.o.Chunk && size < rdb.MaxEnqueueChunkBytes && l.line+1-ch.First < loadMaxLines {
		if !l.scan.Scan() {
			l.eof = true
			if err := l.scan.Err(); err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					l.stop = &Error{Line: l.line + 1, Err: invalid("payload", "is over MaxPayloadBytes (%d)", l.maxPayload)}
				} else {
					l.stop = fmt.Errorf("read input: %w", err)
				}
			} else if l.line < l.next-1 {
				l.stop = fmt.Errorf("load %q was made from another input (this one ends at line %d, but %d lines were loaded)", l.o.Name, l.line, l.next-1)
			}
			break
		}
		l.line++
		b := l.scan.Bytes()
		l.p.Lines++
		l.p.Bytes += int64(len(b)) + 1
		if l.line == 1 {
			l.args.Fingerprint = digest(b)
			if l.cp != nil && l.cp.Fingerprint != l.args.Fingerprint {
				return nil, fmt.Errorf("load %q was made from another input (its first line differs)", l.o.Name)
			}
		}
		if l.line < l.next {
			l.p.Resumed++
			ch.First = l.line + 1
			if l.line == l.next-1 && digest(b) != l.cp.Tail {
				return nil, fmt.Errorf("load %q was made from another input (line %d, the last it loaded, differs)", l.o.Name, l.line)
			}
			if l.p.Resumed%100_000 == 0 {
				l.progress()
			}
			continue
		}
		if len(bytes.TrimSpace(b)) == 0 {
			l.p.Empty++
			last = bytes.Clone(b)
			continue
		}
		var bad error
		if len(b) > l.maxPayload {
			// The scanner's buffer is at least 64 KiB: it refuses only
			// lines longer than that and MaxPayloadBytes+2.
			bad = invalid("payload", "is %d bytes, over MaxPayloadBytes (%d)", len(b), l.maxPayload)
		} else if l.o.Format == JSONLines && !json.Valid(b) {
			bad = invalid("line", "is not one JSON value (format %s)", l.o.Format)
		} else if err := checkPayloadPrefix("line", b); err != nil {
			bad = err // a worker would read it as a task of an ordered queue
		}
		if bad != nil {
			l.stop = &Error{Line: l.line, Err: bad}
			l.eof = true
			l.line-- // not loaded: the chunk ends before it
			l.p.Lines--
			l.p.Bytes -= int64(len(b)) + 1
			break
		}
		p := bytes.Clone(b)
		ch.IDs = append(ch.IDs, l.taskID(secs, l.line))
		ch.Payloads = append(ch.Payloads, p)
		last = p
		size += len(b)
	}
	ch.After = l.line + 1
	if ch.After <= ch.First {
		return nil, nil // nothing left to load
	}
	ch.Tail = digest(last)
	return ch, nil
}

// digest identifies a line in a checkpoint.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// taskID is an xid made of the chunk's time (seconds), the low three bytes
// of the run's number (drawn from Redis for each run, so that two runs,
// of one load or of two, never make the same id) and the line number (five
// bytes): ids sort by line within a chunk, the queue's latency reads the
// time as usual, and about 2,000 consecutive lines share a packed hash
// (rdb.QueueKeys.Packed).
func (l *loader) taskID(secs [4]byte, line int64) string {
	var b [12]byte
	copy(b[:4], secs[:])
	copy(b[4:7], l.run3[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(line))
	copy(b[7:], n[3:])
	id, _ := xid.FromBytes(b[:])
	return id.String()
}

// run sends the input's chunks, at most Window at once, and reconciles with
// the checkpoint whenever a chunk is not applied.
func (l *loader) run() error {
	first, err := l.read()
	if err != nil {
		return err
	}
	if first == nil {
		return l.stop
	}
	// The first chunk on its own: it loads the scripts where missing.
	if err := l.ctx.Err(); err != nil {
		return err
	}
	for tries := 1; ; tries++ {
		cctx, cancel := l.callCtx()
		rep, err := l.st.LoadChunk(cctx, l.q, &l.args, first)
		cancel()
		l.pending = []*rdb.LoadChunk{first}
		var refused redis.Error
		if err != nil && (l.ctx.Err() != nil || errors.As(err, &refused)) {
			if l.ctx.Err() != nil {
				_, err = l.broken(err) // the checkpoint tells whether it was applied
			}
			return err
		}
		if err != nil {
			// The answer is lost (a broken connection): the checkpoint
			// tells whether the chunk was applied, as for the chunks after
			// it. Not applied, it is sent alone again (it loads the
			// scripts where missing), a few times.
			if _, berr := l.broken(err); berr != nil {
				return berr
			}
			if len(l.pending) > 0 {
				if tries < 3 {
					continue
				}
				return err
			}
			break
		}
		if done, err := l.settle(rep); err != nil {
			return err
		} else if !done {
			if err := l.resync(rep); err != nil {
				return err
			}
		}
		break
	}
	pause := newBackoff(20*time.Millisecond, time.Second)
	for {
		retry, err := l.stream()
		if err != nil {
			return err
		}
		if !retry {
			return l.stop
		}
		if l.p.Waiting {
			if err := pause.wait(l.ctx); err != nil {
				return err
			}
		} else {
			pause.reset()
		}
	}
}

// loadDrain bounds how long a stopped load waits for the answers about the
// chunks it had sent.
const loadDrain = 5 * time.Second

// callCtx returns the context of the load's calls to Redis: it ends
// loadDrain after l.ctx ends (or when cancel is called), so that the answers
// about chunks already sent are still read after a stop.
func (l *loader) callCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(l.ctx))
	stop := context.AfterFunc(l.ctx, func() {
		t := time.NewTimer(loadDrain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() { stop(); cancel() }
}

// stream sends pending and new chunks on one connection until the input
// ends (false) or a chunk was refused or the connection failed, after which
// the checkpoint was read again and run calls stream again (true).
//
// When l.ctx ends, it sends nothing more but still reads the answers about
// the chunks on the wire (for at most loadDrain): Redis applies them all the
// same, and so the progress returned counts every task enqueued.
func (l *loader) stream() (bool, error) {
	pctx, pcancel := l.callCtx()
	defer pcancel()
	pipe, err := l.st.OpenLoadPipe(pctx, l.q, &l.args)
	if err != nil {
		return false, err
	}
	defer pipe.Close()
	sent := 0 // of l.pending
	for {
		if l.ctx.Err() != nil && pipe.Pending() == 0 {
			return false, l.ctx.Err()
		}
		for sent < len(l.pending) && l.ctx.Err() == nil && pipe.Pending() < l.o.Window {
			if err := pipe.Push(l.pending[sent]); err != nil {
				return l.broken(err)
			}
			sent++
		}
		for !l.eof && l.ctx.Err() == nil && pipe.Pending() < l.o.Window {
			ch, err := l.read()
			if err != nil {
				return false, err
			}
			if ch == nil {
				break
			}
			l.pending = append(l.pending, ch)
			if err := pipe.Push(ch); err != nil {
				return l.broken(err)
			}
			sent++
		}
		if pipe.Pending() == 0 {
			return false, nil
		}
		rep, err := pipe.Answer()
		var refused redis.Error
		if errors.As(err, &refused) {
			// Redis answered, with an error (OOM under maxmemory, READONLY
			// ...): the chunk was not applied, nor any sent behind it
			// (their first line is not the checkpoint's). Sending them
			// again at once would get the same answer, for ever: stop, as
			// for the first chunk; Resume goes on.
			return false, err
		}
		if err != nil {
			return l.broken(err)
		}
		done, err := l.settle(rep)
		if err != nil {
			return false, err
		}
		if done {
			sent--
			continue
		}
		// Refused: the chunks after it are refused too (their first line is
		// not the checkpoint's). Take their answers, then start again from
		// the checkpoint.
		for pipe.Pending() > 0 {
			if _, err := pipe.Answer(); err != nil {
				l.markUnsure()
				break
			}
		}
		return true, l.resync(rep)
	}
}

// applied counts chunk ch, applied by this run, in the progress and in an
// EventEnqueued (and so in the history).
func (l *loader) applied(ch *rdb.LoadChunk) {
	l.p.Checkpointed = true
	l.p.Enqueued += int64(len(ch.IDs))
	if len(ch.IDs) > 0 {
		l.enqueued(len(ch.IDs))
	}
}

// settle handles the answer about l.pending[0]: true when that chunk is
// loaded (now or before) and dropped from pending.
func (l *loader) settle(rep rdb.LoadReply) (bool, error) {
	ch := l.pending[0]
	switch rep.Status {
	case rdb.LoadApplied:
		l.applied(ch)
	case rdb.LoadSeen:
		if ch.First >= l.start {
			// Sent by this run before, applied, its answer lost (a broken
			// connection after which the checkpoint was read before Redis
			// had run the chunks sent behind the broken one); else another
			// run of this load applied it.
			if !l.unsure[ch] {
				return false, l.errOtherLoader(ch)
			}
			l.applied(ch)
		} else {
			l.p.Resumed += ch.After - ch.First
		}
	case rdb.LoadGap, rdb.LoadFull:
		return false, nil
	case rdb.LoadOtherInput:
		return false, fmt.Errorf("load %q was made from another input (its first line differs)", l.o.Name)
	case rdb.LoadIDExists:
		return false, &Error{Line: ch.First, Err: fmt.Errorf("task id %s of this load is waiting already in queue %s (a chunk sent by another client with the same ids?)", rep.ID, l.q.Ref.Member())}
	default:
		return false, fmt.Errorf("unknown answer %d about lines %d to %d", rep.Status, ch.First, ch.After-1)
	}
	l.next = ch.After
	l.p.Waiting = false
	delete(l.unsure, ch)
	l.pending = l.pending[1:]
	l.progress()
	return true, nil
}

// broken handles a failed connection: the answers of the chunks sent are
// lost, so the checkpoint says which of them were applied.
func (l *loader) broken(err error) (bool, error) {
	l.markUnsure()
	ctx := l.ctx
	if ctx.Err() != nil {
		// Stopped: the chunks sent may have been applied all the same; the
		// checkpoint tells, so that the progress returned is true.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if cp, cerr := l.st.LoadState(ctx, l.q, l.o.Name); cerr == nil && cp != nil {
			_ = l.resync(rdb.LoadReply{Status: rdb.LoadGap, Value: cp.Next})
		}
		return false, l.ctx.Err()
	}
	cp, cerr := l.st.LoadState(ctx, l.q, l.o.Name)
	if cerr != nil {
		// Redis is unreachable: stop here; Resume continues.
		return false, err
	}
	at := int64(1)
	if cp != nil {
		at = cp.Next
	}
	return true, l.resync(rdb.LoadReply{Status: rdb.LoadGap, Value: at})
}

// resync drops the pending chunks that the checkpoint (rep.Value, for a
// gap) shows applied, and checks that the next pending one starts there.
func (l *loader) resync(rep rdb.LoadReply) error {
	if rep.Status == rdb.LoadFull {
		l.p.Waiting = true
		l.progress()
		return nil
	}
	at := rep.Value
	for len(l.pending) > 0 && l.pending[0].After <= at {
		ch := l.pending[0]
		if !l.unsure[ch] {
			return l.errOtherLoader(ch)
		}
		delete(l.unsure, ch)
		l.applied(ch) // applied, its answer lost
		l.pending = l.pending[1:]
	}
	l.next = at
	if len(l.pending) > 0 && l.pending[0].First != at {
		return fmt.Errorf("the checkpoint of load %q is at line %d, but this run's next chunk starts at line %d: is another loader running under this name?",
			l.o.Name, at, l.pending[0].First)
	}
	l.progress()
	return nil
}

func (l *loader) progress() {
	if l.o.Progress != nil {
		l.o.Progress(l.p)
	}
}

// backoff is a growing pause between polls of a full queue.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max, cur: min} }

func (b *backoff) reset() { b.cur = b.min }

func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.cur)
	defer t.Stop()
	b.cur = min(2*b.cur, b.max)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// What Run shares with a worqr.Client (see internal/link).
var (
	target             = link.LoadTarget.(func(*worqr.Client, string) (link.Target, error))
	checkName          = link.CheckName.(func(string, string) error)
	checkPayloadPrefix = link.CheckPayloadPrefix.(func(string, []byte) error)
)

// invalid is bad input, as worqr reports it.
func invalid(field, format string, args ...any) error {
	return &worqr.InvalidError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

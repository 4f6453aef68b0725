package rdb

import (
	"strconv"
	"strings"
)

// Keys builds every Redis key and channel name worqr uses. All names start with
// the namespace and carry a hash tag, so the keys one script touches always
// share one Redis Cluster slot:
//
//	<ns>:{<tag>}:...   the keys of one queue (or of one flow's queues)
//	<ns>:{reg}:...     the registry: workers, keepalives, known queues, lease
//	<ns>:{periodic}:... the schedules of periodic tasks
type Keys struct {
	ns string
}

// NewKeys returns the key builder for namespace ns.
func NewKeys(ns string) Keys { return Keys{ns: ns} }

// Namespace returns the namespace the keys are built in.
func (k Keys) Namespace() string { return k.ns }

func (k Keys) reg() string { return k.ns + ":{reg}:" }

// Workers is the set of registered worker ids.
func (k Keys) Workers() string { return k.reg() + "workers" }

// Keepalive is worker w's keepalive key; it exists while w is alive.
func (k Keys) Keepalive(w string) string { return k.reg() + "w:" + w }

// KeepalivePrefix is Keepalive without the worker id.
func (k Keys) KeepalivePrefix() string { return k.reg() + "w:" }

// WorkerInfo is the hash describing worker w: host, pid, start, ttl, queues.
func (k Keys) WorkerInfo(w string) string { return k.reg() + "wi:" + w }

// KnownQueues is the set of queues any worker ever served (see QueueRef.Member).
func (k Keys) KnownQueues() string { return k.reg() + "queues" }

// Events is the channel every process of the namespace publishes its
// batches of observed events on.
func (k Keys) Events() string { return k.reg() + "events" }

// EventLog is the stream that keeps the last batches of events, when
// enabled.
func (k Keys) EventLog() string { return k.reg() + "events:log" }

// History is the hash of per-minute counters of unix minute m (see
// Store.PublishEvents): field "<queue>|<outcome>", value a count.
func (k Keys) History(m int64) string { return k.reg() + "hist:" + strconv.FormatInt(m, 10) }

// ReaperLease is the key whose holder runs the reaper pass of this interval.
func (k Keys) ReaperLease() string { return k.reg() + "reaper" }

// PeriodicTag is the hash tag of the periodic-task keys.
const PeriodicTag = "periodic"

func (k Keys) periodic() string { return k.ns + ":{" + PeriodicTag + "}:" }

// ScheduleNames is the set of every registered schedule's name.
func (k Keys) ScheduleNames() string { return k.periodic() + "sch-all" }

// ScheduleDue is the sorted set of unpaused schedules by next tick (unix
// ms, Redis time).
func (k Keys) ScheduleDue() string { return k.periodic() + "sch-due" }

// SchedulePrefix + name is the hash of one schedule: its definition, next
// tick, last fired tick, pause flag. No queue key of the tag starts with it.
func (k Keys) SchedulePrefix() string { return k.periodic() + "sch:" }

// Schedule is the hash of schedule name.
func (k Keys) Schedule(name string) string { return k.SchedulePrefix() + name }

// QueueRef names one queue: the hash tag its keys live under and its name. A
// stand-alone queue is its own tag.
type QueueRef struct {
	Tag  string
	Name string
}

// Standalone returns the reference of a queue that is its own tag.
func Standalone(name string) QueueRef { return QueueRef{Tag: name, Name: name} }

// Member is how the queue is stored in the KnownQueues set.
func (q QueueRef) Member() string {
	if q.Tag == q.Name {
		return q.Name
	}
	return q.Tag + "/" + q.Name
}

// Flow reports whether the queue is a flow's stage or child queue.
func (q QueueRef) Flow() bool { return q.Tag != q.Name }

// ParseMember reverses Member.
func ParseMember(m string) QueueRef {
	if tag, name, ok := strings.Cut(m, "/"); ok {
		return QueueRef{Tag: tag, Name: name}
	}
	return Standalone(m)
}

// QueueKeys holds the precomputed names of one queue's keys and channels, so
// that the hot path concatenates nothing but ids.
type QueueKeys struct {
	Ref QueueRef
	// Waiting is the list of task ids waiting to run: pushed at the back
	// (RPUSH), taken from the front (LPOP), requeued to the front (LPUSH).
	Waiting string
	// Holders is the set of worker ids that may hold takings of this queue:
	// the reaper's index, so that no taking is ever unreachable.
	Holders string
	// Seq is the per-tag counter that numbers takings (pids).
	Seq string
	// TaskPrefix + task id is the task hash.
	TaskPrefix string
	// WorkerQueuePrefix + worker id is the hash of what that worker holds
	// here: pid -> task id. A pid in it is a taking the worker owns.
	WorkerQueuePrefix string
	// Scheduled is the sorted set of ids waiting for a due time (delayed
	// enqueues and retries), scored by due time in unix ms (Redis time).
	Scheduled string
	// Dead is the sorted set of dead ids, scored by time of death (unix ms).
	Dead string
	// Retained is the sorted set of ended tasks kept for the retention,
	// scored by finish time.
	Retained string
	// Runs is the sorted set of the tag's flow runs by start time.
	Runs string
	// Config is the hash of queue settings the scripts read (retention,
	// dead-set caps), written by each worker serving the queue.
	Config string
	// UniquePrefix + user key is a uniqueness lock holding a task id.
	UniquePrefix string
	// IDPrefix + task id is the lock of a caller-chosen task id (idempotent
	// enqueue), holding the payload's digest.
	IDPrefix string
	// LoadPrefix + load name is a bulk load's checkpoint (hash).
	LoadPrefix string
	// LoadRuns is the per-tag counter that numbers bulk load runs: a run's
	// number is part of the ids it makes, so two runs never make one id.
	LoadRuns string
	// PackedPrefix + an id without its last 3 characters is the hash that
	// holds the payloads of waiting loaded tasks (see Packed).
	PackedPrefix string
	// StepsPrefix + a batch id is the guard of an EnqueueBatch sent in
	// steps: the number of its last step applied (string, a few minutes'
	// TTL; its last step deletes it). A step runs only after the one before
	// it, so that the steps sent behind a refused one change nothing.
	StepsPrefix string
	// QueuePrefix, ScheduledPrefix, DeadPrefix, WakePrefix, CancelPrefix +
	// a queue name of the same tag give that queue's keys and channels (flow
	// scripts reach sibling queues of their tag with them).
	QueuePrefix, ScheduledPrefix, DeadPrefix, WakePrefix, CancelPrefix string
	// IndexPrefix + property + ":" + value is a flow's run index (zset).
	IndexPrefix string
	// KeyHeads is the hash key -> head task id of an ordered queue's keys
	// (tasks enqueued with a key); KeyListPrefix + key is the list of the
	// ids waiting behind that key's head.
	KeyHeads, KeyListPrefix string
	// KeyBehind counts the entries of all the queue's key lists (string;
	// absent at 0): every script that pushes to or pops from a key list
	// adds to it in the same call (key_behind in lua/include/key.lua).
	KeyBehind string
	// FairRing is the list of a fair queue's keys that may start a task
	// (each once, served in turn); FairState the hash of each key's state
	// ("s:<key>": its running count, its turn's credit, where it is) and
	// policy ("p:<key>", "p:" the queue's default: "<weight> <limit>");
	// FairListPrefix + key the list of the key's waiting ids (see
	// lua/include/fair.lua). FairTimed is the zset of its keys waiting out
	// their rate (scored by when it allows a start again), FairRateLogPrefix
	// + key the zset of the key's starts of its last period (pid by Redis
	// time, PEXPIRE the period).
	FairRing, FairState, FairListPrefix string
	FairTimed, FairRateLogPrefix        string
	// Park is the hash of the workers parked on the queue: worker id ->
	// "<until>|<cap>", written by a take that found the queue empty; an
	// enqueue hands its tasks to them (see enqueue_hand.lua).
	Park string
	// WakeChannel carries wake-ups (the number of tasks made available)
	// and hand-offs (see ParseHandoff).
	WakeChannel string
	// CancelChannel carries the ids of running tasks whose cancel was asked.
	CancelChannel string
	// EndedChannel carries the ends of the queue's tasks a Client.Wait
	// marked ("<state> <id>"; see MarkWaited).
	EndedChannel string
}

// Queue returns the keys of queue q.
func (k Keys) Queue(q QueueRef) QueueKeys {
	base := k.ns + ":{" + q.Tag + "}:"
	return QueueKeys{
		Ref:               q,
		Waiting:           base + "q:" + q.Name,
		Holders:           base + "h:" + q.Name,
		Seq:               base + "seq",
		TaskPrefix:        base + "t:",
		WorkerQueuePrefix: base + "wq:" + q.Name + ":",
		Scheduled:         base + "s:" + q.Name,
		Dead:              base + "dead:" + q.Name,
		Config:            base + "cfg:" + q.Name,
		Retained:          base + "done:" + q.Name,
		Runs:              base + "runs",
		UniquePrefix:      base + "u:" + q.Name + ":",
		IDPrefix:          base + "id:" + q.Name + ":",
		LoadPrefix:        base + "ld:" + q.Name + ":",
		PackedPrefix:      base + "lb:",
		StepsPrefix:       base + "eb:",
		LoadRuns:          base + "lruns",
		QueuePrefix:       base + "q:",
		ScheduledPrefix:   base + "s:",
		DeadPrefix:        base + "dead:",
		WakePrefix:        base + "wake:",
		CancelPrefix:      base + "cancel:",
		IndexPrefix:       base + "ix:",
		KeyHeads:          base + "kh:" + q.Name,
		KeyListPrefix:     base + "k:" + q.Name + ":",
		KeyBehind:         base + "kn:" + q.Name,
		Park:              base + "park:" + q.Name,
		FairRing:          base + "fr:" + q.Name,
		FairState:         base + "fs:" + q.Name,
		FairListPrefix:    base + "fq:" + q.Name + ":",
		FairTimed:         base + "fw:" + q.Name,
		FairRateLogPrefix: base + "fl:" + q.Name + ":",
		WakeChannel:       base + "wake:" + q.Name,
		CancelChannel:     base + "cancel:" + q.Name,
		EndedChannel:      base + "ended:" + q.Name,
	}
}

// EndedQueue returns the queue whose EndedChannel is channel, false when
// channel is none of the namespace's ended channels.
func (k Keys) EndedQueue(channel string) (QueueRef, bool) {
	rest, ok := strings.CutPrefix(channel, k.ns+":{")
	if !ok {
		return QueueRef{}, false
	}
	tag, name, ok := strings.Cut(rest, "}:ended:")
	if !ok || tag == "" || name == "" {
		return QueueRef{}, false
	}
	return QueueRef{Tag: tag, Name: name}, true
}

// Level is the waiting list of priority level n (1..MaxLevel) of the
// queue; level 0 is Waiting itself.
func (q QueueKeys) Level(n int) string {
	if n <= 0 {
		return q.Waiting
	}
	return q.Waiting + ":" + strconv.Itoa(n)
}

// RateLog is the sorted set of the queue's recent starts (pid by start
// time, Redis clock) kept while it has a rate limit.
func (q QueueKeys) RateLog() string { return q.Config + ":rate" }

// MaxLevel is the highest priority level of a task within its queue.
const MaxLevel = 9

// Task is the hash of task id.
func (q QueueKeys) Task(id string) string { return q.TaskPrefix + id }

// Packed returns where a waiting task written by a bulk load keeps its
// payload: the hash shared by the ids that differ from id only in their last
// 3 characters, and the field named by those characters (the whole id when
// it has no more than 3). Such a task has no hash of its own until it is
// taken; lua/include/packed.lua computes the same names.
func (q QueueKeys) Packed(id string) (key, field string) {
	p := packedPart(id)
	return q.PackedPrefix + p, id[len(p):]
}

// WorkerQueue is the hash pid -> task id of what worker w holds in this
// queue.
func (q QueueKeys) WorkerQueue(w string) string { return q.WorkerQueuePrefix + w }

func (q QueueKeys) prefixes() []any {
	return []any{q.QueuePrefix, q.WakePrefix, q.ScheduledPrefix, q.CancelPrefix, q.IndexPrefix}
}

// prefixFields are the tag's prefixes in a layout (put by putPrefixes,
// read by prefixes_of in lua/include/flow.lua): the scripts build from
// them the keys they cannot declare (a sibling queue, its wake-up and
// cancel channels, its scheduled set, a run's index keys).
var prefixFields = []string{"queue_prefix", "wake_prefix", "sched_prefix", "cancel_prefix", "index_prefix"}

// putPrefixes sets prefixFields in v.
func (q QueueKeys) putPrefixes(v values) {
	v.set("queue_prefix", q.QueuePrefix)
	v.set("wake_prefix", q.WakePrefix)
	v.set("sched_prefix", q.ScheduledPrefix)
	v.set("cancel_prefix", q.CancelPrefix)
	v.set("index_prefix", q.IndexPrefix)
}

// ConsumerKeys are the keys of one indexed consumer: its queue (one task per
// index in flight, id and payload the index in decimal) and its progress,
// all under the queue's tag.
type ConsumerKeys struct {
	Queue QueueKeys
	// State is the hash of the consumer's progress: "processed", every
	// index below it is done; "next", the next index to dispatch.
	State string
	// Done is the set of finished indexes at or above processed.
	Done string
}

// Consumer returns the keys of the consumer whose queue is the stand-alone
// queue queue.
func (k Keys) Consumer(queue string) ConsumerKeys {
	q := k.Queue(Standalone(queue))
	base := k.ns + ":{" + queue + "}:"
	return ConsumerKeys{Queue: q, State: base + "cs:" + queue, Done: base + "cd:" + queue}
}

// HashTag returns the hash tag of a key (the part between the first { and the
// next }), or the whole key when it has none, as Redis Cluster computes it.
func HashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

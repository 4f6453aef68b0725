package rdb

// The names the Lua scripts share with Go, as lua/include/codes.lua defines
// them (TestNamesMatchLua checks that both sides agree).

// Outcome is how a taking ended, as a script recorded it.
type Outcome int

// The outcomes scripts return (OUT_* in Lua).
const (
	OutcomeLost      Outcome = 0 // not the owner: nothing changed
	OutcomeDone      Outcome = 1
	OutcomeCancelled Outcome = 2
	OutcomeRequeued  Outcome = 3
	OutcomeRetry     Outcome = 4
	OutcomeDead      Outcome = 5
	OutcomeFannedOut Outcome = 6
	OutcomeForwarded Outcome = 7
	OutcomeExpired   Outcome = 8 // past its deadline at the take: never run
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeRequeued:
		return "requeued"
	case OutcomeRetry:
		return "retry"
	case OutcomeDead:
		return "dead"
	case OutcomeFannedOut:
		return "fanned_out"
	case OutcomeForwarded:
		return "forwarded"
	case OutcomeExpired:
		return "expired"
	default:
		return "lost"
	}
}

// Fields of a task hash (F_* in Lua).
const (
	FieldPayload      = "d"
	FieldState        = "s"
	FieldFailures     = "n"
	FieldCrashes      = "c"
	FieldCancel       = "x"
	FieldWorker       = "w"
	FieldPID          = "p"
	FieldError        = "e"
	FieldMaxAttempts  = "ma"
	FieldTimeout      = "to"
	FieldUnique       = "u"
	FieldResult       = "r"
	FieldDeadReason   = "dr"
	FieldDeadAt       = "dt"
	FieldDeadWorker   = "dw"
	FieldFinishedAt   = "ft"
	FieldCrashedOn    = "cw"
	FieldRaw          = "raw"
	FieldProgress     = "pg"
	FieldDeadline     = "dl"
	FieldRetention    = "rt"
	FieldMeta         = "mt" // metadata of a flow run, child or task (trace context...), opaque to the scripts
	FieldPriority     = "pri"
	FieldStarted      = "sa" // when the latest taking was handed out (unix ms, Redis time)
	FieldHistorySeq   = "hn" // failed attempts recorded in the history so far
	FieldHistory      = "h"  // prefix of the history's fields: h0 .. h<HistoryMax-1>
	FieldEnqueuedAt   = "ea" // when a task whose id the caller chose was enqueued (unix ms, Redis time)
	FieldKey          = "ok" // the key of a task of an ordered queue
	FieldKeyDue       = "od" // due time (unix ms) of a keyed task behind its head
	FieldMergeVersion = "mv" // merges into a keyed task so far
	FieldFairKey      = "fk" // the key (group) of a task of a fair queue
	FieldFairPID      = "fc" // the pid of its taking that counts in its key's running count
	FieldGated        = "fg" // a task of a fair queue enqueued under a gate: its first enqueue (unix ms)
	FieldBatch        = "kb" // on a batch's head: the ids taken with it
	FieldBatchOf      = "kf" // on a task taken in a batch behind its head: the head's id
	FieldWaited       = "wt" // a Client waits for its end: the end publishes it on EndedChannel
	FieldStage        = "st"
	FieldRunStatus    = "fs"
	FieldRunRetention = "fr"
	FieldRunIndexed   = "fi"
	FieldPending      = "kp"
	FieldParent       = "pr"
	FieldParentNext   = "pn"
	FieldParentPolicy = "pf"
	FieldAwait        = "aw" // a flow run's signal it sleeps awaiting (Client.Signal)
)

// Prefixes of the per-child and per-field entries of a run hash.
const (
	runFieldPrefix       = "f:"  // state field
	runChildPrefix       = "k:"  // child status
	runChildQueuePrefix  = "kq:" // child queue
	runChildResultPrefix = "kr:" // child result
	runChildErrorPrefix  = "ke:" // child error
	runIndexedPrefix     = "i:"  // indexed value the run was started with
)

// Task states (field FieldState; S_* in Lua).
const (
	StateQueued    = "queued"
	StateActive    = "active"
	StateScheduled = "scheduled"
	StateDead      = "dead"
	StateDone      = "done"
	StateCancelled = "cancelled"
	StateChildren  = "children"
	StateExpired   = "expired"
)

// Run statuses (field FieldRunStatus; R_* in Lua).
const (
	RunRunning   = "running"
	RunDone      = "done"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

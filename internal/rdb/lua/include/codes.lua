-- codes: the names shared with Go (internal/rdb/names.go; a test checks that
-- both sides agree): what scripts return, the task-hash fields and the states.
local OUT_LOST, OUT_DONE, OUT_CANCELLED, OUT_REQUEUED = 0, 1, 2, 3
local OUT_RETRY, OUT_DEAD, OUT_FANNED_OUT, OUT_FORWARDED = 4, 5, 6, 7
local OUT_EXPIRED = 8
-- fields of a task hash
local F_PAYLOAD, F_STATE, F_FAILURES, F_CRASHES = 'd', 's', 'n', 'c'
local F_CANCEL, F_WORKER, F_PID, F_ERROR = 'x', 'w', 'p', 'e'
local F_MAX_ATTEMPTS, F_TIMEOUT, F_UNIQUE, F_RESULT = 'ma', 'to', 'u', 'r'
local F_DEAD_REASON, F_DEAD_AT, F_DEAD_WORKER, F_FINISHED_AT = 'dr', 'dt', 'dw', 'ft'
local F_CRASHED_ON, F_RAW, F_PROGRESS, F_PRIORITY = 'cw', 'raw', 'pg', 'pri'
local F_DEADLINE, F_RETENTION, F_META = 'dl', 'rt', 'mt'
-- when the latest taking was handed out (Redis ms); the attempt history's
-- count and its fields' prefix (see history.lua); when a task whose id the
-- caller chose was enqueued (Redis ms)
local F_STARTED, F_HISTORY_SEQ, F_HISTORY, F_ENQUEUED_AT = 'sa', 'hn', 'h', 'ea'
-- fields of a task of an ordered queue (a task enqueued with a key)
local F_KEY, F_KEY_DUE, F_MERGE_VERSION = 'ok', 'od', 'mv'
-- fields of a task of a fair queue: its key, and the pid of the taking
-- counted in its key's running count (see fair.lua)
local F_FAIR_KEY, F_FAIR_PID = 'fk', 'fc'
-- a task of a fair queue enqueued under a gate (KeyPolicy.Singleton,
-- Debounce, Throttle): when the first enqueue it gathers came (Redis ms)
local F_GATED = 'fg'
-- a batch of one key (QueueConfig.KeyBatch): on its head the ids of the
-- tasks taken with it, space-separated; on each of those, the head's id
local F_BATCH, F_BATCH_OF = 'kb', 'kf'
-- a Client waits for the task's end (wait_mark.lua): the end publishes it
local F_WAITED = 'wt'
-- fields of a flow run (a task hash too) and of a child task
local F_STAGE, F_RUN_STATUS, F_RUN_RETENTION, F_RUN_INDEXED = 'st', 'fs', 'fr', 'fi'
local F_PENDING, F_PARENT, F_PARENT_NEXT, F_PARENT_POLICY = 'kp', 'pr', 'pn', 'pf'
-- a flow run's signal it sleeps awaiting (see flow.lua, "Signals")
local F_AWAIT = 'aw'
-- task states ('s') and run statuses ('fs')
local S_QUEUED, S_ACTIVE, S_SCHEDULED, S_DEAD = 'queued', 'active', 'scheduled', 'dead'
local S_DONE, S_CANCELLED, S_CHILDREN, S_EXPIRED = 'done', 'cancelled', 'children', 'expired'
local R_RUNNING, R_DONE, R_FAILED, R_CANCELLED = 'running', 'done', 'failed', 'cancelled'

--- @include "take"
-- take: pop up to ARGV[TAKE.max] task ids from the front of a queue and
-- record that worker ARGV[TAKE.worker] owns each taking. Bad task data never
-- reaches a worker and never loops: such a task goes to the dead set with
-- the reason.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:wq:<queue>:<w>     (hash) pid -> task id, what worker w holds here
-- KEYS[3] <ns>:{T}:h:<queue>          (set)  workers that may hold takings
-- KEYS[4] <ns>:{T}:seq                (string) taking counter of the tag
-- KEYS[5] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[6] <ns>:{T}:cfg:<queue>        (hash) queue settings (and the limits)
-- KEYS[7..] declared for a cluster, reached by name: with TAKE.levels n > 0
--         the level lists <ns>:{T}:q:<queue>:<n> .. :1; with TAKE.limited
--         the rate log <ns>:{T}:cfg:<queue>:rate (zset: pid by start time,
--         Redis clock); with TAKE.park > 0, last, the park hash
--         <ns>:{T}:park:<queue>
-- ARGV: the layout LAYOUT.TAKE (takeArgv in take.go, where each field is
--   described): the take's own fields (worker, max, deadline, max_crashes,
--   kind, safe, levels, limited, batch, park, park_ms: see take_tasks),
--   the task key prefix (task_prefix) and the tag's queue, wake,
--   scheduled, cancel and index prefixes (a buried flow run fails; a
--   buried flow child counts as failed).
-- The deadline: the worker's keepalive was set to live at least until
-- then. A take at or after it is refused, so no taking is recorded for a
-- worker whose keepalive may be gone: a reaper that saw the keepalive gone
-- and requeued the worker's queues (those of its registration) can forget
-- it for good.
-- The task hashes a take touches cannot be declared in
-- KEYS (the ids are popped here); they are built from prefixes of KEYS[1]'s
-- hash tag, so they live in its slot.
-- Returns: flat array of one row per id, the layout LAYOUT.TAKEN (takenRow in
-- take.go): id, pid, payload (for a stage queue the run's whole hash as a
-- flat field/value array or, past RUN_INLINE fields for the take, its
-- number of fields: the worker reads it; for a task or child created with
-- metadata {payload, metadata}), attempt, crashes, max attempts ("" = default),
-- timeout ms (""), parent run id ("" unless a flow child; with batch, for
-- a task taken behind its key's head, the head's id).
-- For an id buried instead of handed out, pid is "" and payload is the reason;
-- for a flow child that so failed its run (fail-fast), attempt is then the
-- array of its siblings the run's stop took out of where they waited, as
-- queue, id pairs (no end of a taking reports their cancels; "" for none).
-- When a global limit cut the take, one more value ends the reply: the ms
-- until the rate limit allows the next start, or -1 (the concurrency limit
-- is reached: wait for a wake-up).
-- Error "WQEXPIRED ..." when the deadline has passed (nothing changed);
-- "TRYAGAIN ..." when a popped task's hash is on another node during a
-- Redis Cluster slot migration (nothing changed).
local TAKE = LAYOUT.TAKE
if now_ms() >= tonumber(ARGV[TAKE.deadline]) then
  return redis.error_reply('WQEXPIRED the worker\'s keepalive deadline has passed')
end
local out = take_tasks({waiting = KEYS[1], wq = KEYS[2], holders = KEYS[3], seq = KEYS[4], dead = KEYS[5],
  cfg = KEYS[6], tprefix = ARGV[TAKE.task_prefix], park = KEYS[#KEYS]}, ARGV, TAKE)
if not out then
  -- The slot is being migrated and some task hashes already moved: the
  -- cluster client retries TRYAGAIN until the migration ends.
  return redis.error_reply('TRYAGAIN the queue\'s slot is being migrated: nothing was taken')
end
return out

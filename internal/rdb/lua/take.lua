--- @include "take"
-- take: pop up to ARGV[2] task ids from the front of a queue and record that
-- worker ARGV[1] owns each taking. Bad task data never reaches a worker and
-- never loops: such a task goes to the dead set with the reason.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:wq:<queue>:<w>     (hash) pid -> task id, what worker w holds here
-- KEYS[3] <ns>:{T}:h:<queue>          (set)  workers that may hold takings
-- KEYS[4] <ns>:{T}:seq                (string) taking counter of the tag
-- KEYS[5] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[6] <ns>:{T}:cfg:<queue>        (hash) queue settings (and the limits)
-- KEYS[7..] declared for a cluster, reached by name: with mode 'p<n>' the
--         level lists <ns>:{T}:q:<queue>:<n> .. :1; with 'l' the rate log
--         <ns>:{T}:cfg:<queue>:rate (zset: pid by start time, Redis clock);
--         with 'h<n>', last, the park hash <ns>:{T}:park:<queue>
-- ARGV[1] worker id   ARGV[2] max count
-- ARGV[3] task key prefix
-- ARGV[4] max crashes (a task that crashed this many workers is buried; 0 = no limit)
-- ARGV[5] "1" for a flow stage queue: the payload slot holds the run's whole
--         hash (flat field/value array) instead of the payload, or, past
--         RUN_INLINE fields for the take, its number of fields (an
--         integer: the worker reads it, see take.lua); "2" for a
--         flow child queue (a buried child with no data left is counted in
--         the run its id names; a child created with metadata has
--         {payload, metadata} in the payload slot); "0" else. A
--         trailing "m" (on a Redis Cluster) reads every task hash before
--         writing anything, so that a slot migration caught half way
--         changes nothing (TRYAGAIN);
--         then 'p<n>' when the queue has priority levels 1..n, 'l' when
--         it may have global limits, 'k<n>' when its worker takes
--         batches of up to n tasks per key and 'h<n>' when a take that
--         finds the queue empty parks the worker (see take_tasks)
-- ARGV[6..10] queue, wake, scheduled, cancel, index prefixes of the tag (a
--         buried flow run fails; a buried flow child counts as failed)
-- ARGV[11] the worker's deadline (unix ms, Redis time): its keepalive was set
--         to live at least until then. A take at or after it is refused, so
--         no taking is recorded for a worker whose keepalive may be gone: a
--         reaper that saw the keepalive gone and requeued the worker's queues
--         (those of its registration) can forget it for good.
-- The task hashes a take touches cannot be declared in
-- KEYS (the ids are popped here); they are built from prefixes of KEYS[1]'s
-- hash tag, so they live in its slot.
-- Returns: flat array of 8 values per id:
--   {id, pid, payload, attempt, crashes, max attempts ("" = default),
--    timeout ms (""), parent run id ("" unless a flow child; with 'k<n>',
--    for a task taken in a batch behind its key's head, the head's id)}
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
if now_ms() >= tonumber(ARGV[11]) then
  return redis.error_reply('WQEXPIRED the worker\'s keepalive deadline has passed')
end
local out = take_tasks({waiting = KEYS[1], wq = KEYS[2], holders = KEYS[3], seq = KEYS[4], dead = KEYS[5],
  cfg = KEYS[6], tprefix = ARGV[3], park = KEYS[#KEYS], deadline = ARGV[11]},
  ARGV[1], ARGV[2], tonumber(ARGV[4]), ARGV[5], prefixes(ARGV, 6))
if not out then
  -- The slot is being migrated and some task hashes already moved: the
  -- cluster client retries TRYAGAIN until the migration ends.
  return redis.error_reply('TRYAGAIN the queue\'s slot is being migrated: nothing was taken')
end
return out

--- @include "codes"
--- @include "pushback"
-- promote: move scheduled task id (delayed, or waiting for a retry) to the
-- back of its queue now, as move does once it is due (its priority level's
-- list when the queue has levels), with a wake-up. Its attempts, deadline
-- and the rest are kept. Atomic with move: a task moved by one is not
-- moved by the other.
-- KEYS[1] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[2] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:t:<id>             (hash) the task
-- ARGV[1] id   ARGV[2] task key prefix   ARGV[3] wake channel
-- Returns: 1 moved, 0 not scheduled (unknown, waiting, running, ended, or a
-- task of an ordered queue waiting behind its key's head).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- A key of the wrong type must not fail the call: the take buries it.
redis.pcall('HSET', KEYS[4], F_STATE, S_QUEUED)
push_back(KEYS[2], KEYS[3], ARGV[2], {ARGV[1]})
redis.call('PUBLISH', ARGV[3], 1)
return 1

--- @include "codes"
-- wait_mark: mark a task whose end a Client waits for, so that the end
-- script publishes its end at once on the queue's ended channel (see
-- end_waited in ending.lua) instead of leaving it to the events, which a
-- process publishes in batches. A task with no hash (never enqueued, ended
-- and gone, or a packed task of a bulk load not yet taken) is left alone:
-- its Wait hears its end from the events.
-- KEYS[1] <ns>:{T}:t:<id>             (hash) the task
-- Returns: 1 when the task was marked, 0 when it has no hash.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], F_WAITED, '1')
return 1

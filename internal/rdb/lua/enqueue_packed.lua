--- @include "codes"
--- @include "packed"
-- enqueue_packed: one step of a large plain batch (EnqueueBatch of more than
-- MaxEnqueueChunk tasks with no per-task option): the tasks are written
-- packed, as a bulk load writes them (see packed.lua), pushed at the back of
-- the queue, and one wake-up is published with their number. The ids are
-- fresh xids (unique by construction), so nothing is checked before writing.
-- The steps of a batch travel many at once: step n > 0 is applied only when
-- the batch's guard says step n-1 was (else {-5}, nothing written), so that
-- the steps behind one Redis refused change nothing.
-- KEYS[1]   <ns>:{T}:q:<queue>     (list) waiting ids
-- KEYS[2]   <ns>:{T}:eb:<batch>    (string) the batch's guard: its last step applied
-- KEYS[3..] <ns>:{T}:lb:<prefix>   (hash) the step's packed hashes
-- ARGV[1] wake channel   ARGV[2] task key prefix (<ns>:{T}:t:)
-- ARGV[3] the step's number (0 first)   ARGV[4] "1": the batch's last step
-- ARGV[5] the guard's TTL ms
-- ARGV[6..n+5] task ids;  ARGV[n+6..2n+5] payloads, in the same order
-- Returns {n}, as enqueue, or {-5}.
local step = tonumber(ARGV[3])
if step > 0 and redis.call('GET', KEYS[2]) ~= tostring(step - 1) or
    step == 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  -- (Step 0 finds a guard only when the client closed it: its reply was
  -- taken for lost, and the batch ends before it.)
  return {-5}
end
local n = (#ARGV - 5) / 2
if n > 0 then
  local order, groups = packed_group(ARGV[2], ARGV, 6, n)
  packed_write(order, groups, KEYS[1], ARGV, 6, n)
  redis.call('PUBLISH', ARGV[1], n)
end
-- (Last: a step that failed half way does not let the next one in.)
if ARGV[4] == '1' then
  redis.call('DEL', KEYS[2])
else
  redis.call('SET', KEYS[2], step, 'PX', ARGV[5])
end
return {n}

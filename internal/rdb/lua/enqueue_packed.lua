--- @include "codes"
--- @include "packed"
-- enqueue_packed: one step of a large plain batch (EnqueueBatch of more than
-- MaxEnqueueChunk tasks with no per-task option): the tasks are written
-- packed, as a bulk load writes them (see packed.lua), pushed at the back of
-- the queue, and one wake-up is published with their number. The ids are
-- fresh xids (unique by construction), so nothing is checked before writing.
-- KEYS[1]   <ns>:{T}:q:<queue>     (list) waiting ids
-- KEYS[2..] <ns>:{T}:lb:<prefix>   (hash) the step's packed hashes
-- ARGV[1] wake channel   ARGV[2] task key prefix (<ns>:{T}:t:)
-- ARGV[3..n+2] task ids;  ARGV[n+3..2n+2] payloads, in the same order
-- Returns {n}, as enqueue.
local n = (#ARGV - 2) / 2
if n > 0 then
  local order, groups = packed_group(ARGV[2], ARGV, 3, n)
  packed_write(order, groups, KEYS[1], ARGV, 3, n)
  redis.call('PUBLISH', ARGV[1], n)
end
return {n}

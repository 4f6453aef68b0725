--- @include "consumer"
-- consumer_done: record that the job at an index is done, only while the
-- caller owns the taking of its task (a zombie's late call changes
-- nothing), and advance the processed index over the finished indexes
-- that follow it. Idempotent: a second call finds the index done.
-- KEYS[1] <ns>:{C}:cs:<queue>         (hash) processed, next
-- KEYS[2] <ns>:{C}:cd:<queue>         (set)  finished indexes >= processed
-- KEYS[3] <ns>:{C}:wq:<queue>:<w>     (hash) pid -> task id the worker holds
-- ARGV[1] pid   ARGV[2] task id   ARGV[3] the index
-- ARGV[4] the first index (when no progress is stored)
-- ARGV[5] at most this many advance steps
-- Returns: {code, processed, more}: code C_RECORDED, C_ALREADY (done
-- before), C_LOST (not the owner: nothing changed) or C_UNKNOWN (the index
-- was never dispatched: nothing changed); more is 1 when the advance
-- stopped at its bound.
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  return {C_LOST, 0, 0}
end
local processed, nxt = consumer_state(KEYS[1], tonumber(ARGV[4]))
local i = tonumber(ARGV[3])
local code = C_RECORDED
if i >= nxt then
  return {C_UNKNOWN, processed, 0}
end
if i < processed then
  code = C_ALREADY
elseif redis.call('SADD', KEYS[2], cidx(i)) == 0 then
  code = C_ALREADY
end
local more
processed, more = consumer_advance(KEYS[2], processed, tonumber(ARGV[5]))
redis.call('HSET', KEYS[1], 'processed', cidx(processed))
return {code, processed, more and 1 or 0}

--- @include "codes"
--- @include "time"
-- enqueue_hand: enqueue one task with nothing but a payload (and maybe a
-- max attempts, timeout or retention of its own), and when a worker is
-- parked on the queue with a free slot, hand it the task in the same call:
-- the taking is fenced and recorded as a take records it (a pid from the
-- tag's counter, the task's state, the worker's holdings), and announced on
-- the wake channel with everything the worker needs to run it, so that no
-- take follows. Otherwise the task is pushed at the back of the queue with
-- a wake-up, as the enqueue script does.
-- KEYS[1] <ns>:{T}:q:<queue>      (list)   waiting ids
-- KEYS[2] <ns>:{T}:t:<id>         (hash)   the task
-- KEYS[3] <ns>:{T}:park:<queue>   (hash)   parked worker -> "<until>|<cap>"
-- KEYS[4] <ns>:{T}:seq            (string) taking counter of the tag
-- The holdings <ns>:{T}:wq:<queue>:<w> of the parked worker picked cannot
-- be declared: the worker is read from KEYS[3].
-- ARGV[1] wake channel   ARGV[2] task id   ARGV[3] payload
-- ARGV[4] holdings prefix <ns>:{T}:wq:<queue>:
-- ARGV[5] max attempts override ("" = queue default)
-- ARGV[6] timeout override in ms ("")   ARGV[7] retention ms ("")
-- The hand-off message: "h\n<worker>\n<pid>\n<id>\n<max attempts>\n
-- <timeout>\n<payload>". A plain wake-up carries a count.
-- Returns: {1}.
local extra = {}
if ARGV[5] ~= '' then extra[#extra + 1] = F_MAX_ATTEMPTS; extra[#extra + 1] = ARGV[5] end
if ARGV[6] ~= '' then extra[#extra + 1] = F_TIMEOUT; extra[#extra + 1] = ARGV[6] end
if ARGV[7] ~= '' then extra[#extra + 1] = F_RETENTION; extra[#extra + 1] = ARGV[7] end
local e = redis.call('HRANDFIELD', KEYS[3], 1, 'WITHVALUES')
if e[1] then
  local w = e[1]
  local deadline, cap = string.match(e[2], '^(%d+)|(%d+)$')
  local held
  if deadline and tonumber(deadline) > now_ms() then
    -- On a cluster during a slot migration the holdings may be on the
    -- other node: then nothing is handed.
    held = redis.pcall('HLEN', ARGV[4] .. w)
  end
  if type(held) == 'number' and held < tonumber(cap) then
    local pid = tostring(redis.call('INCR', KEYS[4]))
    redis.call('HSET', KEYS[2], F_PAYLOAD, ARGV[3], F_STATE, S_ACTIVE, F_WORKER, w, F_PID, pid, unpack(extra))
    redis.call('HSET', ARGV[4] .. w, pid, ARGV[2])
    redis.call('PUBLISH', ARGV[1], 'h\n' .. w .. '\n' .. pid .. '\n' .. ARGV[2] .. '\n' .. ARGV[5] .. '\n' ..
      ARGV[6] .. '\n' .. ARGV[3])
    return {1}
  end
  -- Past its deadline (dead, frozen or stopped), full (it parks again when
  -- a take finds the queue empty: tasks waiting are taken first), or out
  -- of reach: not parked any more.
  redis.call('HDEL', KEYS[3], w)
end
redis.call('HSET', KEYS[2], F_PAYLOAD, ARGV[3], unpack(extra))
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[1], 1)
return {1}

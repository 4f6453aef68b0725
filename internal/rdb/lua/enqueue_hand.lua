--- @include "codes"
--- @include "time"
-- enqueue_hand: enqueue n tasks with nothing but a payload each (and maybe
-- a max attempts, timeout or retention shared by all), and, when no task
-- waits in the queue, hand the first of them to workers parked on it, as
-- many as they have free slots, in the same call: each taking is fenced
-- and recorded as a take records it (a pid from the tag's counter, the
-- task's state, the worker's holdings), and announced on the wake channel
-- with everything the worker needs to run it, so that no take follows.
-- The tasks left are pushed at the back of the queue with one wake-up, as
-- the enqueue script does. Tasks are handed in their order, and their pids
-- increase in it. A task already waiting (given back to the front, due, or
-- too large to hand) is never overtaken: then nothing is handed. One call
-- hands at most MAX_HANDED tasks and MAX_HANDED_BYTES of payload, since
-- every process subscribed to the queue receives each message.
-- KEYS[1]      <ns>:{T}:q:<queue>     (list)   waiting ids
-- KEYS[2]      <ns>:{T}:park:<queue>  (hash)   parked worker -> "<until>|<cap>"
-- KEYS[3]      <ns>:{T}:seq           (string) taking counter of the tag
-- KEYS[4..n+3] <ns>:{T}:t:<id>        (hash)   one per task
-- KEYS[n+4]    <ns>:{T}:eb:<batch>    (string) with ARGV[6]: the guard of
--              an EnqueueBatch of one call (see enqueue.lua's steps): the
--              call applies only where no guard is, and leaves one saying
--              "0" (applied), so that a client whose reply was lost closes
--              it and reads whether the batch is in
-- The holdings <ns>:{T}:wq:<queue>:<w> of the parked workers picked cannot
-- be declared: the workers are read from KEYS[2].
-- ARGV[1] wake channel   ARGV[2] holdings prefix <ns>:{T}:wq:<queue>:
-- ARGV[3] max attempts override ("" = queue default)
-- ARGV[4] timeout override in ms ("")   ARGV[5] retention ms ("")
-- ARGV[6] the guard's TTL ms ("": no guard)
-- ARGV[7..n+6] task ids, in KEYS order   ARGV[n+7..2n+6] payloads
-- A hand-off message: "h\n<worker>\n<pid>\n<id>\n<max attempts>\n
-- <timeout>\n<payload>", one per task handed. A plain wake-up carries a
-- count.
-- Returns: {n}; {-5} when the guard was closed (nothing written).
local MAX_HANDED, MAX_HANDED_BYTES = 64, 65536
local guard = ARGV[6] ~= '' and KEYS[#KEYS]
local n = #KEYS - 3
if guard then
  n = n - 1
  if redis.call('EXISTS', guard) == 1 then
    return {-5}
  end
end
local A = 6 -- ARGV[A + i]: task i's id; ARGV[A + n + i]: its payload
local function applied()
  if guard then
    redis.call('SET', guard, '0', 'PX', ARGV[6])
  end
  return {n}
end
local extra = {}
if ARGV[3] ~= '' then extra[#extra + 1] = F_MAX_ATTEMPTS; extra[#extra + 1] = ARGV[3] end
if ARGV[4] ~= '' then extra[#extra + 1] = F_TIMEOUT; extra[#extra + 1] = ARGV[4] end
if ARGV[5] ~= '' then extra[#extra + 1] = F_RETENTION; extra[#extra + 1] = ARGV[5] end
local i = 1 -- the next task to place
-- How many of the first tasks may be handed: at most MAX_HANDED, and
-- MAX_HANDED_BYTES of payload (the first always fits: each is at most
-- 4 KiB).
local limit, bytes = 0, 0
while limit < math.min(n, MAX_HANDED) do
  bytes = bytes + #ARGV[A + n + limit + 1]
  if limit > 0 and bytes > MAX_HANDED_BYTES then
    break
  end
  limit = limit + 1
end
-- Distinct parked workers, at random: at most as many as there are tasks
-- to hand, and a few; none when a task waits (read only when someone is
-- parked: an enqueue that finds no one costs no command more).
local e = redis.call('HRANDFIELD', KEYS[2], math.min(limit, 4), 'WITHVALUES')
if #e > 0 and redis.call('LLEN', KEYS[1]) > 0 then
  e = {}
end
for j = 1, #e, 2 do
  if i > limit then
    break
  end
  local w = e[j]
  local deadline, cap = string.match(e[j + 1], '^(%d+)|(%d+)$')
  local held
  if deadline and tonumber(deadline) > now_ms() then
    -- On a cluster during a slot migration the holdings may be on the
    -- other node: then nothing is handed to w.
    held = redis.pcall('HLEN', ARGV[2] .. w)
  end
  if type(held) == 'number' and held < tonumber(cap) then
    local k = math.min(tonumber(cap) - held, limit - i + 1)
    local first = redis.call('INCRBY', KEYS[3], k) - k
    local holdings = {}
    for m = 0, k - 1 do
      local id, payload, pid = ARGV[A + i + m], ARGV[A + n + i + m], string.format('%d', first + m + 1)
      redis.call('HSET', KEYS[3 + i + m], F_PAYLOAD, payload, F_STATE, S_ACTIVE, F_WORKER, w, F_PID, pid,
        F_STARTED, now_ms(), unpack(extra))
      holdings[#holdings + 1] = pid
      holdings[#holdings + 1] = id
    end
    redis.call('HSET', ARGV[2] .. w, unpack(holdings))
    for m = 0, k - 1 do
      redis.call('PUBLISH', ARGV[1], 'h\n' .. w .. '\n' .. holdings[2 * m + 1] .. '\n' .. ARGV[A + i + m] .. '\n' ..
        ARGV[3] .. '\n' .. ARGV[4] .. '\n' .. ARGV[A + n + i + m])
    end
    i = i + k
  else
    -- Past its deadline (dead, frozen or stopped), full (it parks again
    -- when a take finds the queue empty: tasks waiting are taken first),
    -- or out of reach: not parked any more.
    redis.call('HDEL', KEYS[2], w)
  end
end
if i > n then
  return applied()
end
local ids = {}
for m = i, n do
  redis.call('HSET', KEYS[3 + m], F_PAYLOAD, ARGV[A + n + m], unpack(extra))
  ids[#ids + 1] = ARGV[A + m]
end
redis.call('RPUSH', KEYS[1], unpack(ids))
redis.call('PUBLISH', ARGV[1], #ids)
return applied()

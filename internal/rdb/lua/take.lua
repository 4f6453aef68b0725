--- @include "codes"
--- @include "time"
--- @include "fix_type"
--- @include "bury"
--- @include "flow"
-- take: pop up to ARGV[2] task ids from the front of a queue and record that
-- worker ARGV[1] owns each taking. Bad task data never reaches a worker and
-- never loops: such a task goes to the dead set with the reason.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[3] <ns>:{T}:h:<queue>          (set)  workers that may hold takings
-- KEYS[4] <ns>:{T}:seq                (string) taking counter of the tag
-- KEYS[5] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[6] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- ARGV[1] worker id   ARGV[2] max count
-- ARGV[3] task key prefix   ARGV[4] processing list prefix
-- ARGV[5] max crashes (a task that crashed this many workers is buried; 0 = no limit)
-- ARGV[6] "1" for a flow stage queue: the payload slot holds the run's whole
--         hash (flat field/value array) instead of the payload; "2" for a
--         flow child queue (a buried child with no data left is counted in
--         the run its id names)
-- ARGV[7..11] queue, wake, scheduled, cancel, index prefixes of the tag (a
--         buried flow run fails; a buried flow child counts as failed)
-- ARGV[12] the worker's deadline (unix ms, Redis time): its keepalive was set
--         to live at least until then. A take at or after it is refused, so
--         no taking is recorded for a worker whose keepalive may be gone: a
--         reaper that saw the keepalive gone and requeued the worker's queues
--         (those of its registration) can forget it for good.
-- The task hashes and processing lists a take touches cannot be declared in
-- KEYS (the ids are popped here); they are built from prefixes of KEYS[1]'s
-- hash tag, so they live in its slot.
-- Returns: flat array of 8 values per id:
--   {id, pid, payload, attempt, crashes, max attempts ("" = default),
--    timeout ms (""), parent run id ("" unless a flow child)}
-- For an id buried instead of handed out, pid is "" and payload is the reason.
-- Error "WQEXPIRED ..." when the deadline has passed (nothing changed).
if now_ms() >= tonumber(ARGV[12]) then
  return redis.error_reply('WQEXPIRED the worker\'s keepalive deadline has passed')
end
local ids = redis.call('LPOP', KEYS[1], ARGV[2])
if not ids then
  return {}
end
local last = redis.call('INCRBY', KEYS[4], #ids)
local pid = last - #ids
local maxc = tonumber(ARGV[5])
local pfx = prefixes(7)
local out = {}
local pids = {}

local function buried(id, reason)
  table.insert(out, id)
  table.insert(out, '')
  table.insert(out, reason)
  for _ = 1, 5 do table.insert(out, '') end
end

for _, id in ipairs(ids) do
  pid = pid + 1
  local tkey = ARGV[3] .. id
  local t = redis.pcall('HMGET', tkey, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_PARENT)
  local reason
  if type(t) ~= 'table' or t.err then
    reason = fix_type(tkey)
  elseif not t[1] then
    if redis.call('EXISTS', tkey) == 0 then
      reason = 'missing: no task data for this id'
    else
      reason = 'corrupt: task data has no payload'
    end
  elseif (t[2] and not tonumber(t[2])) or (t[3] and not tonumber(t[3])) then
    reason = 'corrupt: attempt or crash count is not a number'
  elseif maxc > 0 and (tonumber(t[3]) or 0) >= maxc then
    reason = 'crashed: the task was running on ' .. t[3] .. ' workers that died'
  end
  if reason then
    bury(KEYS[5], KEYS[6], ARGV[3], id, reason, '', ARGV[1])
    buried_in_flow(tkey, id, reason, pfx, ARGV[3], ARGV[6] == '2')
    buried(id, reason)
  else
    local spid = tostring(pid)
    redis.call('HSET', tkey, F_STATE, S_ACTIVE, F_WORKER, ARGV[1], F_PID, spid)
    redis.call('RPUSH', ARGV[4] .. spid, id)
    table.insert(pids, spid)
    table.insert(out, id)
    table.insert(out, spid)
    if ARGV[6] == '1' then
      table.insert(out, redis.call('HGETALL', tkey))
    else
      table.insert(out, t[1])
    end
    table.insert(out, (tonumber(t[2]) or 0) + 1)
    table.insert(out, tonumber(t[3]) or 0)
    table.insert(out, t[4] or '')
    table.insert(out, t[5] or '')
    table.insert(out, t[6] or '')
  end
end
if #pids > 0 then
  redis.call('SADD', KEYS[2], unpack(pids))
  redis.call('SADD', KEYS[3], ARGV[1])
end
return out

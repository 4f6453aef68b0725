--- @include "codes"
--- @include "time"
-- enqueue: write task hashes and push their ids at the back of a queue (or
-- into its scheduled set when delayed), then publish one wake-up carrying the
-- number of tasks made available. The caller splits large batches (Go:
-- rdb.MaxEnqueueBatch), so that one call never holds Redis for long.
-- KEYS[1]      <ns>:{T}:q:<queue>     (list)  waiting ids (of the priority level)
-- KEYS[2]      <ns>:{T}:s:<queue>     (zset)  scheduled ids by due time (ms)
-- KEYS[3..n+2] <ns>:{T}:t:<id>        (hash)  one per task
-- then, when ARGV[4] is "1": <ns>:{T}:u:<queue>:<key> (string) the unique lock
-- then, when ARGV[8] is "1": <ns>:{T}:id:<queue>:<id> (string) the
--              caller-chosen id's lock, holding the payload's digest (last)
-- ARGV[1] wake channel
-- ARGV[2] delay ms, relative to Redis time ("" = none)
-- ARGV[3] due time in unix ms ("" = none)
-- ARGV[4] "1" when a unique lock is declared ("" = none; one task only)
-- ARGV[5] unique TTL ms
-- ARGV[6] max attempts override ("" = queue default)
-- ARGV[7] timeout override in ms ("" = queue default)
-- ARGV[8] "1": one task with a caller-chosen id (idempotent enqueue)
-- ARGV[9] its lock's TTL ms   ARGV[10] the payload's digest
-- ARGV[11..n+10] task ids, in KEYS order;  ARGV[n+11..2n+10] payloads, in KEYS order
-- ARGV[2n+11] (optional) the tasks' priority level ("" or absent = 0); the
--              caller then passes the level's list as KEYS[1]
-- Returns: {n} on success; {-1, holder id} when the unique key is held;
-- {-2} when this id was enqueued before with the same payload digest (an
-- enqueue retried after its reply was lost: nothing new); {-3} when it was
-- enqueued before with another payload. Nothing is written unless the
-- enqueue succeeds.
local n = #KEYS - 2
local first = 11
local idlock, unique = nil, ''
if ARGV[8] == '1' then
  idlock = KEYS[#KEYS]
  n = n - 1
end
if ARGV[4] ~= '' then
  unique = KEYS[2 + n]
  n = n - 1
end
if idlock then
  local prev = redis.call('GET', idlock)
  if prev then
    if prev == ARGV[10] then
      return {-2}
    end
    return {-3}
  end
end
if unique ~= '' then
  if not redis.call('SET', unique, ARGV[first], 'PX', ARGV[5], 'NX') then
    return {-1, redis.call('GET', unique)}
  end
end
if idlock then
  redis.call('SET', idlock, ARGV[10], 'PX', ARGV[9])
end
local pri = ARGV[first + 2 * n]
if pri == '' or pri == '0' then pri = nil end
local due
if ARGV[2] ~= '' then
  due = now_ms() + tonumber(ARGV[2])
elseif ARGV[3] ~= '' then
  due = tonumber(ARGV[3])
end
for i = 1, n do
  local tkey = KEYS[i + 2]
  redis.call('HSET', tkey, F_PAYLOAD, ARGV[first + n + i - 1])
  if unique ~= '' then redis.call('HSET', tkey, F_UNIQUE, unique) end
  if ARGV[6] ~= '' then redis.call('HSET', tkey, F_MAX_ATTEMPTS, ARGV[6]) end
  if ARGV[7] ~= '' then redis.call('HSET', tkey, F_TIMEOUT, ARGV[7]) end
  if pri then redis.call('HSET', tkey, F_PRIORITY, pri) end
  if due then
    redis.call('HSET', tkey, F_STATE, S_SCHEDULED)
    redis.call('ZADD', KEYS[2], due, ARGV[first + i - 1])
  end
end
if due then
  return {n}
end
-- RPUSH in chunks: Lua's unpack is limited to a few thousand values.
local i = first
local last = first + n - 1
while i <= last do
  local j = math.min(i + 999, last)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('PUBLISH', ARGV[1], n)
return {n}

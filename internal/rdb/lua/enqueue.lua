--- @include "codes"
--- @include "time"
-- enqueue: write task hashes and push their ids at the back of a queue (or
-- into its scheduled set when delayed), then publish one wake-up carrying the
-- number of tasks made available. The caller splits large batches (Go:
-- rdb.MaxEnqueueBatch), so that one call never holds Redis for long.
-- KEYS[1]      <ns>:{T}:q:<queue>     (list)  waiting ids
-- KEYS[2]      <ns>:{T}:s:<queue>     (zset)  scheduled ids by due time (ms)
-- KEYS[3..n+2] <ns>:{T}:t:<id>        (hash)  one per task
-- KEYS[n+3]    <ns>:{T}:u:<queue>:<key> (string) the unique lock, when ARGV[4]
--              is "1" (one task only)
-- ARGV[1] wake channel
-- ARGV[2] delay ms, relative to Redis time ("" = none)
-- ARGV[3] due time in unix ms ("" = none)
-- ARGV[4] "1" when the last key is a unique lock ("" = none)
-- ARGV[5] unique TTL ms
-- ARGV[6] max attempts override ("" = queue default)
-- ARGV[7] timeout override in ms ("" = queue default)
-- ARGV[8..n+7] task ids, in KEYS order;  ARGV[n+8..] payloads, in KEYS order
-- Returns: {n} on success; {-1, holder id} when the unique key is held.
local n = #KEYS - 2
local first = 8
local unique = ''
if ARGV[4] ~= '' then
  unique = KEYS[#KEYS]
  n = n - 1
  if not redis.call('SET', unique, ARGV[first], 'PX', ARGV[5], 'NX') then
    return {-1, redis.call('GET', unique)}
  end
end
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

--- @include "codes"
--- @include "time"
-- remove_queue: one step of removing a stand-alone queue (Inspector.RemoveQueue).
-- KEYS[1..10] <ns>:{Q}:q:<queue>, q:<queue>:1..9 (lists)  waiting ids by level
-- KEYS[11] <ns>:{Q}:s:<queue>        (zset)  scheduled
-- KEYS[12] <ns>:{Q}:dead:<queue>     (zset)  dead
-- KEYS[13] <ns>:{Q}:done:<queue>     (zset)  retained
-- KEYS[14] <ns>:{Q}:h:<queue>        (set)   holder index
-- KEYS[15] <ns>:{Q}:cfg:<queue>      (hash)  config
-- KEYS[16] <ns>:{Q}:cfg:<queue>:rate (zset)  rate log
-- KEYS[17] <ns>:{Q}:kh:<queue>       (hash)  key heads of an ordered queue
-- KEYS[18] <ns>:{Q}:park:<queue>     (hash)  parked workers
-- KEYS[19] <ns>:{Q}:cs:<queue>       (hash)  an indexed consumer's progress
-- KEYS[20] <ns>:{Q}:cd:<queue>       (set)   its finished indexes
-- KEYS[21] <ns>:{Q}:kn:<queue>       (string) the count of tasks behind key heads
-- KEYS[22] <ns>:{Q}:fr:<queue>       (list)  a fair queue's keys in turn
-- KEYS[23] <ns>:{Q}:fs:<queue>       (hash)  a fair queue's keys' states and policies
-- KEYS[24] <ns>:{Q}:fw:<queue>       (zset)  a fair queue's keys waiting out their rate
-- ARGV[1] op: 'retained' or 'drop'
-- ARGV[2] task prefix <ns>:{Q}:t:   ARGV[3] worker-queue prefix <ns>:{Q}:wq:<queue>:
-- ARGV[4] retained: the most entries to delete (at most 250); drop: '1' when
--         forced (an indexed consumer's progress does not keep the queue)
--
-- retained: delete up to ARGV[4] entries of the retained set, oldest first,
-- and the hash of each that is still an ended task (done, cancelled,
-- expired: an id enqueued again since, EnqueueOpts.ID, keeps its hash).
-- Returns the number of entries removed (fewer than asked: none are left).
--
-- drop: when the queue holds nothing (no waiting task, in a fair queue's
-- keys' lists either (the count 'n' of KEYS[23], see fair.lua: the lists
-- are named by keys, and empty lists do not exist), no scheduled, held,
-- dead, retained task whose retention runs, no key with tasks, and unless forced
-- no consumer progress), UNLINK every key above and each holder's
-- worker-queue hash (all empty but the config, the rate log, the park hash,
-- the consumer's progress, a fair queue's ring, state hash and keys waiting
-- out their rate (keys left with nothing, policies; its keys' rate logs
-- expire a period after their last start), and the retained set's expired entries, whose
-- hashes expired with them), but for the config's priority level 'prio',
-- kept (never lowered: see below). Returns {1, keys deleted, not counting
-- a config kept for its 'prio'}; otherwise nothing
-- changes and it returns {0, waiting, scheduled, held, dead, retained,
-- keys, consumer progress (0/1)}. Idempotent: a repeat deletes nothing and
-- returns {1, 0}.
local op = ARGV[1]
if op == 'retained' then
  local ids = redis.call('ZRANGE', KEYS[13], 0, tonumber(ARGV[4]) - 1)
  if #ids == 0 then
    return 0
  end
  for _, id in ipairs(ids) do
    local tkey = ARGV[2] .. id
    local s = redis.call('HGET', tkey, F_STATE)
    if s == S_DONE or s == S_CANCELLED or s == S_EXPIRED then
      redis.call('UNLINK', tkey)
    end
  end
  redis.call('ZREM', KEYS[13], unpack(ids))
  return #ids
end
if op ~= 'drop' then
  return redis.error_reply('ERR remove_queue: unknown op ' .. tostring(op))
end
local waiting = 0
for i = 1, 10 do
  waiting = waiting + redis.call('LLEN', KEYS[i])
end
waiting = waiting + math.max(tonumber(redis.call('HGET', KEYS[23], 'n')) or 0, 0)
local scheduled = redis.call('ZCARD', KEYS[11])
local dead = redis.call('ZCARD', KEYS[12])
local retained = redis.call('ZCOUNT', KEYS[13], '(' .. now_ms(), '+inf')
local holders = redis.call('SMEMBERS', KEYS[14])
local held = 0
for _, w in ipairs(holders) do
  held = held + redis.call('HLEN', ARGV[3] .. w)
end
local keys = redis.call('HLEN', KEYS[17])
local progress = 0
if ARGV[4] ~= '1' then
  progress = redis.call('EXISTS', KEYS[19])
end
if waiting + scheduled + held + dead + retained + keys + progress > 0 then
  return {0, waiting, scheduled, held, dead, retained, keys, progress}
end
local del = {}
for i = 1, 24 do
  del[#del + 1] = KEYS[i]
end
for _, w in ipairs(holders) do
  del[#del + 1] = ARGV[3] .. w
end
-- The config's highest priority level in use ('prio', see levels.lua) is
-- never lowered: a client trusts the level it saw recorded for a while
-- and enqueues at it without recording it again, and a task in a level
-- list the config does not name is never taken. It stays, alone.
local prio = redis.call('HGET', KEYS[15], 'prio')
local n = redis.call('UNLINK', unpack(del))
if prio then
  redis.call('HSET', KEYS[15], 'prio', prio)
  n = n - 1
end
return {1, n}

-- periodic: change one schedule of periodic tasks. Every step that moves a
-- schedule's next tick is a compare-and-set on it, so that peers racing on
-- one tick (or a late peer with an old view) change it once.
-- KEYS[1] <ns>:{periodic}:sch:<name> (hash) the schedule: d (definition),
--         k (timing key), n (next tick, unix ms), l (last fired tick),
--         f (ticks fired), p ("1" while paused)
-- KEYS[2] <ns>:{periodic}:sch-due     (zset) unpaused schedules by next tick
-- KEYS[3] <ns>:{periodic}:sch-all     (set)  every schedule's name
-- ARGV[1] op   ARGV[2] the schedule's name
-- op put:     ARGV[3] definition, ARGV[4] timing key, ARGV[5] next tick.
--             A schedule whose timing key is unchanged keeps its next tick,
--             last tick and pause (only its definition is replaced).
--             Returns 1 when the timing was set, 0 when kept.
-- op advance: ARGV[3] the next tick the caller read, ARGV[4] the new next
--             tick, ARGV[5] the latest tick it fired ("" = none), ARGV[6]
--             how many ticks it fired, ARGV[7] the timing key of the
--             definition the caller read (absent: not compared). Returns 1
--             when applied, 0 when the next tick was no longer ARGV[3]
--             (another peer advanced it, or the schedule was removed) or
--             the timing is no longer ARGV[7] (re-registered with a new
--             timing whose first tick happened to be ARGV[3]: the caller's
--             next tick is one of the old timing's).
-- op pause:   Returns 1, or 0 when there is no such schedule.
-- op resume:  ARGV[3] the next tick (the first after Redis's now: ticks
--             that fell during the pause are not missed, they are skipped),
--             ARGV[4] the timing key ARGV[3] was worked out from (absent:
--             not compared). Returns -1 (nothing changed) when the timing
--             is no longer ARGV[4].
--             Returns 1, or 0 when there is no such schedule.
-- op remove:  Returns 1, or 0 when there was no such schedule.
local key, due, all = KEYS[1], KEYS[2], KEYS[3]
local op, name = ARGV[1], ARGV[2]
if op == 'put' then
  redis.call('SADD', all, name)
  local k = redis.call('HGET', key, 'k')
  redis.call('HSET', key, 'd', ARGV[3])
  if k == ARGV[4] then
    return 0
  end
  redis.call('HSET', key, 'k', ARGV[4], 'n', ARGV[5])
  if redis.call('HEXISTS', key, 'p') == 0 then
    redis.call('ZADD', due, ARGV[5], name)
  end
  return 1
end
if redis.call('EXISTS', key) == 0 then
  redis.call('ZREM', due, name)
  return 0
end
if op == 'advance' then
  if redis.call('HGET', key, 'n') ~= ARGV[3] then
    return 0
  end
  if ARGV[7] and redis.call('HGET', key, 'k') ~= ARGV[7] then
    return 0
  end
  redis.call('HSET', key, 'n', ARGV[4])
  if ARGV[5] ~= '' then
    redis.call('HSET', key, 'l', ARGV[5])
    redis.call('HINCRBY', key, 'f', tonumber(ARGV[6]))
  end
  if redis.call('HEXISTS', key, 'p') == 0 then
    redis.call('ZADD', due, ARGV[4], name)
  end
  return 1
elseif op == 'pause' then
  redis.call('HSET', key, 'p', '1')
  redis.call('ZREM', due, name)
  return 1
elseif op == 'resume' then
  if ARGV[4] and redis.call('HGET', key, 'k') ~= ARGV[4] then
    -- Re-registered with a new timing since the caller read it (its next
    -- tick is one of the old timing's), or removed.
    return redis.call('EXISTS', key) == 1 and -1 or 0
  end
  if redis.call('HEXISTS', key, 'p') == 1 then
    redis.call('HDEL', key, 'p')
    redis.call('HSET', key, 'n', ARGV[3])
    redis.call('ZADD', due, ARGV[3], name)
  end
  return 1
elseif op == 'remove' then
  redis.call('DEL', key)
  redis.call('ZREM', due, name)
  redis.call('SREM', all, name)
  return 1
end
return redis.error_reply('ERR periodic: unknown op ' .. op)

-- cancel: remove a waiting task, or ask the owner of a running one to stop.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:t:<id>             (hash) the task
-- ARGV[1] task id   ARGV[2] cancel channel
-- Returns: 0 nothing to cancel (unknown, finished, or already asked),
-- 1 removed from the queue, 2 cancel asked of the running owner.
local s = redis.call('HMGET', KEYS[2], 's', 'x')
if redis.call('EXISTS', KEYS[2]) == 0 or s[2] then
  return 0
end
if s[1] ~= 'active' then
  if redis.call('LREM', KEYS[1], 1, ARGV[1]) > 0 then
    redis.call('DEL', KEYS[2])
    return 1
  end
end
-- Running, or held by a dead worker and about to be recovered: the finish
-- (or the recovery) of that taking sees the mark and ends it as cancelled.
redis.call('HSET', KEYS[2], 'x', '1')
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 2

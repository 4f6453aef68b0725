-- finish: record the end of a taking, only if the caller still owns it.
-- KEYS[1] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[2] <ns>:{T}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{T}:t:<id>             (hash) the task
-- ARGV[1] pid
-- Returns: 0 lost (not the owner: nothing changed), 1 done, 2 cancelled (a
-- cancel was asked while it ran).
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
local x = redis.call('HGET', KEYS[3], 'x')
redis.call('DEL', KEYS[3])
if x then
  return 2
end
return 1

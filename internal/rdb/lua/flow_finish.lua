-- flow_finish: record the end of a stage taking of a flow run, only if the
-- caller still owns it, and in the same step merge the stage's result into
-- the run, then fan out children or forward the run to the next stage.
-- KEYS[1] <ns>:{F}:wq:<stage>:<w>     (set)  pids worker w holds in the stage
-- KEYS[2] <ns>:{F}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{F}:t:<run id>         (hash) the run
-- KEYS[4] <ns>:{F}:s:<stage>          (zset) scheduled ids of the stage
-- KEYS[5] <ns>:{F}:dead:<stage>       (zset) dead ids of the stage
-- KEYS[6] <ns>:{F}:cfg:<stage>        (hash) stage queue settings
-- ARGV[1] pid  ARGV[2] run id  ARGV[3] worker id  ARGV[4] mode done|retry|dead
-- ARGV[5] retry delay ms  ARGV[6] error text  ARGV[7] run retention ms
-- ARGV[8] task key prefix  ARGV[9] next stage ("" after the last)
-- ARGV[10..14] queue, wake, scheduled, cancel, index prefixes of the tag
-- ARGV[15] n indexed properties, then the property names
-- then: n field/value pairs (count of values), then the values ("f:" names)
-- then: n child values (3 per child: child id, child queue, payload)
-- last: the stage's fan-out policy, "failfast" | "continue"
-- (the run's next stage and the policy are stored on each child)
-- Returns: 0 lost, 1 run done, 2 cancelled, 4 retry, 5 dead (run failed),
-- 6 fanned out, 7 forwarded.
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
local id = ARGV[2]
local retention = tonumber(ARGV[7])
local pfx = prefixes(10)
local props, i = list_from(15)
local fields, j = list_from(i)
local children = list_from(j)
local ixkeys = index_keys(KEYS[3], props, pfx)
local t = redis.call('HMGET', KEYS[3], 'x', 'fs')
if t[2] ~= 'running' then
  redis.call('HDEL', KEYS[3], 'w', 'p')
  return 2
end
if t[1] then
  end_run(KEYS[3], id, 'cancelled', retention, ixkeys)
  return 2
end
local mode = ARGV[4]
if mode == 'retry' then
  redis.call('HINCRBY', KEYS[3], 'n', 1)
  redis.call('HSET', KEYS[3], 's', 'scheduled', 'e', ARGV[6])
  redis.call('HDEL', KEYS[3], 'w', 'p')
  redis.call('ZADD', KEYS[4], now_ms() + tonumber(ARGV[5]), id)
  return 4
elseif mode == 'dead' then
  redis.call('HINCRBY', KEYS[3], 'n', 1)
  redis.call('HSET', KEYS[3], 'fs', 'failed', 'ft', now_ms())
  bury(KEYS[5], KEYS[6], ARGV[8], id, 'failed', ARGV[6], ARGV[3])
  index_expire(ixkeys, id, now_ms() + retention)
  return 5
end
if #fields > 0 then
  redis.call('HSET', KEYS[3], unpack(fields))
end
if #children > 0 then
  local woken = {}
  local n = 0
  for c = 1, #children, 3 do
    local cid, q, payload = children[c], children[c + 1], children[c + 2]
    redis.call('HSET', ARGV[8] .. cid, 'd', payload, 'pr', id, 'pn', ARGV[9], 'pf', ARGV[#ARGV])
    redis.call('RPUSH', pfx.queue .. q, cid)
    redis.call('HSET', KEYS[3], 'k:' .. cid, 'pending', 'kq:' .. cid, q)
    woken[q] = (woken[q] or 0) + 1
    n = n + 1
  end
  redis.call('HSET', KEYS[3], 'kp', n, 's', 'children')
  redis.call('HDEL', KEYS[3], 'w', 'p', 'n', 'c', 'e')
  for q, count in pairs(woken) do
    redis.call('PUBLISH', pfx.wake .. q, count)
  end
  return 6
end
return forward_run(KEYS[3], id, ARGV[9], pfx, retention, ixkeys)

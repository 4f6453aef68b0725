--- @include "codes"
--- @include "time"
--- @include "flow"
-- flow_start: create a flow run and push it at the back of its first stage's
-- queue, with a wake-up; index it by its declared properties. A run
-- started with children (RunOpts.Children: a batch) is fanned out instead,
-- as a stage's end fans out (FLOW.fan_out): its first stage runs when the
-- last child ends.
-- KEYS[1]    <ns>:{F}:q:<first stage>  (list) waiting ids
-- KEYS[2]    <ns>:{F}:t:<run id>       (hash) the run: task fields + state
-- KEYS[3]    <ns>:{F}:runs            (zset) every run id by start time
-- KEYS[4..]  <ns>:{F}:ix:<prop>:<value> (zset) run ids, +inf while running
-- ARGV[1] wake channel   ARGV[2] run id   ARGV[3] first stage name
-- ARGV[4] run retention ms   ARGV[5] indexed properties, comma-separated
--         (both stored on the run, so any script can end it)
-- ARGV[6] task key prefix   ARGV[7..11] queue, wake, scheduled, cancel,
--         index prefixes of the tag   ARGV[12] the children's policy
--         (failfast | continue)
-- ARGV[13] m, then m FANOUT values (m/4 children; 0: none)
-- then state field/value pairs (names already prefixed "f:"), and the
--         run's metadata ('mt', F_META) when it has some
-- Returns: 1, or 0 when the run id exists.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('HSET', KEYS[2], F_PAYLOAD, '', F_STAGE, ARGV[3], F_RUN_STATUS, R_RUNNING, F_STATE, S_QUEUED,
  F_RUN_RETENTION, ARGV[4], F_RUN_INDEXED, ARGV[5])
local m = tonumber(ARGV[13])
if #ARGV > 13 + m then
  hset_pairs(KEYS[2], ARGV, 14 + m)
end
for prop in string.gmatch(ARGV[5], '[^,]+') do
  local v = redis.call('HGET', KEYS[2], 'f:' .. prop)
  if v then
    redis.call('HSET', KEYS[2], 'i:' .. prop, v)
  end
end
redis.call('ZADD', KEYS[3], now_ms(), ARGV[2])
for i = 4, #KEYS do
  index_trim(KEYS[i], now_ms())
  redis.call('ZADD', KEYS[i], 'inf', ARGV[2])
  redis.call('PERSIST', KEYS[i])
end
if m > 0 then
  local pfx = prefixes(ARGV, 7)
  FLOW.fan_out(KEYS[2], ARGV[2], {unpack(ARGV, 14, 13 + m)}, ARGV[6], pfx, ARGV[3], ARGV[12], function(cq)
    redis.call('PUBLISH', pfx.wake .. cq, 1)
  end)
  return 1
end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[1], 1)
return 1

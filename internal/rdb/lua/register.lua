--- @include "time"
-- register: create worker ARGV[2]'s keepalive, then list it among the
-- workers, describe it and record the queues it serves, in one step, so a
-- reaper never sees a listed worker without its key.
-- KEYS[1] <ns>:{reg}:w:<worker>   (string) keepalive
-- KEYS[2] <ns>:{reg}:workers      (set)
-- KEYS[3] <ns>:{reg}:queues       (set)    known queues
-- KEYS[4] <ns>:{reg}:wi:<worker>  (hash)   host, pid, start (Redis time ms),
--                                          ttl ms, queues (comma-separated)
-- ARGV[1] TTL in ms   ARGV[2] worker id   ARGV[3] host   ARGV[4] process id
-- ARGV[5..] queue members
-- Returns: the Redis time (unix ms) read before the keepalive was set (so it
-- lives at least until then + TTL), or 0 when the id was already taken (ids
-- are never reused).
local now = now_ms()
if not redis.call('SET', KEYS[1], 'RUN', 'PX', ARGV[1], 'NX') then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[2])
local queues = {}
for i = 5, #ARGV do
  queues[#queues + 1] = ARGV[i]
end
if #queues > 0 then
  redis.call('SADD', KEYS[3], unpack(queues))
end
redis.call('HSET', KEYS[4], 'host', ARGV[3], 'pid', ARGV[4], 'start', now, 'ttl', ARGV[1],
  'queues', table.concat(queues, ','))
return now

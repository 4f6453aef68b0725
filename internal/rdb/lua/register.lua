-- register: create worker ARGV[2]'s keepalive, then list it among the
-- workers and record the queues it serves, in one step, so a reaper never sees
-- a listed worker without its key.
-- KEYS[1] <ns>:{reg}:w:<worker>   (string) keepalive
-- KEYS[2] <ns>:{reg}:workers      (set)
-- KEYS[3] <ns>:{reg}:queues       (set)    known queues
-- ARGV[1] TTL in ms   ARGV[2] worker id   ARGV[3..] queue members
-- Returns: 1, or 0 when the id was already taken (ids are never reused).
if not redis.call('SET', KEYS[1], 'RUN', 'PX', ARGV[1], 'NX') then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[2])
if #ARGV > 2 then
  redis.call('SADD', KEYS[3], unpack(ARGV, 3))
end
return 1

--- @include "time"
-- periodic_due: the schedules whose next tick has come, on Redis's clock.
-- KEYS[1] <ns>:{periodic}:sch-due (zset) unpaused schedules by next tick
-- ARGV[1] now in unix ms ("" = Redis time; tests give a time)
-- ARGV[2] most schedules returned
-- ARGV[3] schedule hash prefix <ns>:{periodic}:sch: (the names are read
--         here, so their hashes cannot be declared; they share KEYS[1]'s
--         tag, so they live in its slot)
-- Returns: {now, name, definition, next tick, ...}, next tick as the hash
-- holds it (the value advance compares). A name whose hash is gone is
-- dropped from KEYS[1].
local now = now_ms()
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
end
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {now}
for _, name in ipairs(names) do
  local h = redis.call('HMGET', ARGV[3] .. name, 'd', 'n')
  if h[1] and h[2] then
    out[#out + 1] = name
    out[#out + 1] = h[1]
    out[#out + 1] = h[2]
  else
    redis.call('ZREM', KEYS[1], name)
  end
end
return out

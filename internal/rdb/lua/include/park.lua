--- @include "time"
-- park records that worker w, whose take found queue k empty, may be
-- handed tasks by the enqueue (see enqueue_hand.lua): field w of the park
-- hash k.park holds "<until>|<cap>": w's deadline (unix ms, Redis time:
-- no task is handed at or after it), or valid_ms from now if sooner (the
-- worker parks again at each poll, so a dead one is skipped that soon),
-- and how many takings of the queue w runs at once (the enqueue hands one
-- only while w holds fewer). w joins
-- the holder index here, once, so that what it is handed is reachable by
-- the reaper. A queue that is paused, has priority levels in use or global
-- limits is never handed to: w's field is removed instead (the calls that
-- set those flags remove the whole hash).
local function park(k, w, deadline, cap, valid_ms)
  local c = redis.call('HMGET', k.cfg, 'paused', 'prio', 'rate', 'conc')
  if c[1] or (tonumber(c[2]) or 0) > 0 or (tonumber(c[3]) or 0) > 0 or (tonumber(c[4]) or 0) > 0 then
    redis.call('HDEL', k.park, w)
    return
  end
  local upto = deadline
  if valid_ms > 0 and now_ms() + valid_ms < tonumber(deadline) then
    upto = string.format('%d', now_ms() + valid_ms)
  end
  redis.call('HSET', k.park, w, upto .. '|' .. cap)
  redis.call('SADD', k.holders, w)
end

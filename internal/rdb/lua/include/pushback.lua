--- @include "cfg"
--- @include "level"
--- @include "fair"
-- pushback: tasks made due again go to the back of their queue.

-- push_back RPUSHes ids (task hashes tprefix .. id) at the back of the
-- queue whose level 0 list is waiting: each at the back of its priority
-- level's list when the queue has levels (its config's 'prio'); on a fair
-- queue (its config's 'fair'), a task with a key at the back of its key's
-- list (fair.lua).
local function push_back(waiting, cfgkey, tprefix, ids)
  local c = redis.call('HMGET', cfgkey, 'prio', 'fair')
  if c[2] == '1' then
    local qname, rest = FAIR.queue_of(tprefix, waiting), {}
    for _, id in ipairs(ids) do
      local fk = redis.pcall('HGET', tprefix .. id, F_FAIR_KEY)
      if type(fk) == 'string' then
        FAIR.push(tprefix, qname, fk, id, false)
      else
        rest[#rest + 1] = id
      end
    end
    ids = rest
  end
  if (tonumber(c[1]) or 0) > 0 then
    ids = push_by_level(waiting, tprefix, ids)
  end
  if #ids > 0 then
    redis.call('RPUSH', waiting, unpack(ids))
  end
end

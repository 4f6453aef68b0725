--- @include "cfg"
--- @include "level"
-- pushback: tasks made due again go to the back of their queue.

-- push_back RPUSHes ids (task hashes tprefix .. id) at the back of the
-- queue whose level 0 list is waiting: each at the back of its priority
-- level's list when the queue has levels (its config's 'prio').
local function push_back(waiting, cfgkey, tprefix, ids)
  if cfg_num(cfgkey, 'prio', 0) > 0 then
    ids = push_by_level(waiting, tprefix, ids)
  end
  if #ids > 0 then
    redis.call('RPUSH', waiting, unpack(ids))
  end
end

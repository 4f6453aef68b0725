--- @include "codes"
-- level: the waiting lists of a queue whose tasks have priorities. Level 0
-- is the queue's waiting list itself; level n > 0 is <waiting>:<n>.

-- MAX_LEVEL is the highest priority level (Go: rdb.MaxLevel).
local MAX_LEVEL = 9

-- level_list is the waiting list of a task of priority level pri (a string
-- read from its hash; nil, '' or '0' for level 0) in the queue whose level 0
-- list is waiting. A field that is not a level 1..MAX_LEVEL as enqueue
-- writes it (data changed by hand, say) counts as level 0: a list named
-- from it would be read by no take and seen by no count.
local function level_list(waiting, pri)
  if type(pri) == 'string' and string.match(pri, '^[1-9]$') and tonumber(pri) <= MAX_LEVEL then
    return waiting .. ':' .. pri
  end
  return waiting
end

-- push_by_level RPUSHes each of ids (task hashes tprefix .. id) at the back
-- of its priority level's list and returns the ids of level 0, for the
-- caller to push to waiting itself.
local function push_by_level(waiting, tprefix, ids)
  local plain = {}
  for _, id in ipairs(ids) do
    local pri = redis.pcall('HGET', tprefix .. id, F_PRIORITY)
    local list = level_list(waiting, pri)
    if list ~= waiting then
      redis.call('RPUSH', list, id)
    else
      plain[#plain + 1] = id
    end
  end
  return plain
end

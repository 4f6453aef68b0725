--- @include "codes"
-- level: the waiting lists of a queue whose tasks have priorities. Level 0
-- is the queue's waiting list itself; level n > 0 is <waiting>:<n>.

-- level_list is the waiting list of a task of priority level pri (a string
-- read from its hash; nil, '' or '0' for level 0) in the queue whose level 0
-- list is waiting.
local function level_list(waiting, pri)
  if pri and pri ~= '' and pri ~= '0' then
    return waiting .. ':' .. pri
  end
  return waiting
end

-- own: the ownership check, the one place it is written. A worker owns a
-- taking exactly while its worker-queue hash maps the taking's pid to the
-- taking's task id; taking the pid out is the claim. The id matters: after
-- a failover the new primary may hand out a pid again (its counter lacks
-- the lost takes), and a late end of the old taking must not claim the new
-- one. own_all checks the takings of one script call together: one HMGET
-- and one HDEL per worker-queue hash, however many takings it holds.
-- takings: a list of {wq, pid, id}. Returns a list of booleans, one per
-- taking: true for the ones claimed; false, with nothing changed, for a
-- caller that no longer owns it (a zombie, a stale pid) and for a taking
-- named twice in the call (its second time).
local function own_all(takings)
  local byq, order = {}, {}
  for j, t in ipairs(takings) do
    local g = byq[t[1]]
    if not g then
      g = {}
      byq[t[1]] = g
      order[#order + 1] = t[1]
    end
    g[#g + 1] = j
  end
  local owned = {}
  for _, wq in ipairs(order) do
    local g = byq[wq]
    local pids = {}
    for n, j in ipairs(g) do
      pids[n] = takings[j][2]
    end
    local have = redis.call('HMGET', wq, unpack(pids))
    local claim, seen = {}, {}
    for n, j in ipairs(g) do
      local pid = pids[n]
      if have[n] == takings[j][3] and not seen[pid] then
        seen[pid] = true
        owned[j] = true
        claim[#claim + 1] = pid
      else
        owned[j] = false
      end
    end
    if #claim > 0 then
      redis.call('HDEL', wq, unpack(claim))
    end
  end
  return owned
end

-- own_every claims the takings pids (ids: their task ids, in order) of one
-- worker-queue hash together: all of them, or none when any is not owned
-- (a batch of one key, ended as one). Returns whether it claimed them.
local function own_every(wq, pids, ids)
  local have = redis.call('HMGET', wq, unpack(pids))
  for j = 1, #pids do
    if have[j] ~= ids[j] then
      return false
    end
  end
  redis.call('HDEL', wq, unpack(pids))
  return true
end

--- @include "codes"
--- @include "time"
-- fair: fair queues (KeyPolicy.Fair). A task enqueued with a key (its
-- group: a tenant, a customer) on a fair queue waits in its key's list
-- <ns>:{T}:fq:<queue>:<key>, not in the queue's waiting list; the ring
-- <ns>:{T}:fr:<queue> lists the keys that may start a task now, each once;
-- the hash <ns>:{T}:fs:<queue> holds, per key, its state ('s:<key>') and its
-- policy ('p:<key>', and 'p:' the queue's default): '<weight> <limit>', or
-- '<weight> <limit> <rate> <period ms>' for a key that starts at most rate
-- tasks in any window of period (see FAIR.rate_room); and
-- two counts of the queue, kept by every script that changes what they
-- count, in the same call, so that reading them costs one HMGET whatever
-- the number of keys: FAIR.N ('n') the ids in all the keys' lists, FAIR.K
-- ('k') the keys whose state is not FAIR.OUT (absent: 0).
-- A take serves the ring's keys in turn (deficit round robin: a key of
-- weight w starts up to w tasks per turn), each within its limit of
-- running takings, and takes from the waiting list (tasks with no key)
-- first. A key's state is one integer, so that the end frees a slot with
-- one HINCRBY and learns from its reply what else to do:
--
--   running * FAIR.RUN + credit * FAIR.CREDIT + where
--
-- running: the takings of the key counted by a take and not yet freed
-- (every counted taking carries its pid in F_FAIR_PID; whatever ends,
-- requeues or releases it frees it once, in the script that takes its pid
-- out of its worker's holdings, so that no count leaks: a crashed
-- worker's come back with its tasks); credit: what is left of its turn
-- when a take stopped half way through it (then it is at the ring's
-- front); where: FAIR.OUT (no task waits, as far as the scripts know),
-- FAIR.IN (in the ring, once), FAIR.BLOCKED (tasks wait, but it runs its
-- limit: the end that frees one of its slots puts it back in the ring) or
-- FAIR.TIMED (tasks wait, but it started its rate: it waits in the zset
-- <ns>:{T}:fw:<queue>, scored by when its rate allows a start again, for
-- a take to put it back in the ring, see FAIR.readmit).
-- Invariants: a key is in the ring exactly when its state says FAIR.IN;
-- a key whose list holds an id is not FAIR.OUT (every push goes through
-- FAIR.push, or the enqueue's check). A key in the ring may have nothing
-- to start (its tasks were cancelled, or its limit was lowered): the take
-- that reaches it takes it out. The scripts reach these keys by name, from
-- the tag's prefix and the queue's name, so they share the caller's slot.
--
-- Everything here is a field of the one table FAIR (a script holds at most
-- 200 locals, its includes' among them): FAIR.push, FAIR.RUN, ...
local FAIR = {RUN = 4096, CREDIT = 4, OUT = 0, IN = 1, BLOCKED = 2, TIMED = 3, N = 'n', K = 'k', TW = 'tw'}

-- FAIR.SCAN is how many ring entries past its need a take reads, so that
-- keys with nothing to start (taken out as it reaches them: a key stays in
-- turn until a take finds its list empty) do not leave it short;
-- FAIR.ROUNDS how often it plans again after keys ran dry (each round pops
-- each key it plans for once, and takes at least one key out). A take left
-- short while the ring holds more keys publishes a wake-up: the worker
-- takes again.
FAIR.SCAN, FAIR.ROUNDS = 16, 16

-- FAIR.names returns the ring, the state hash and the key list prefix of
-- fair queue qname, from the task prefix <ns>:{T}:t:; then the zset of
-- keys waiting out their rate and the prefix of the keys' rate logs.
function FAIR.names(tprefix, qname)
  local base = string.sub(tprefix, 1, #tprefix - 2)
  return base .. 'fr:' .. qname, base .. 'fs:' .. qname, base .. 'fq:' .. qname .. ':',
    base .. 'fw:' .. qname, base .. 'fl:' .. qname .. ':'
end

-- FAIR.queue_of returns the queue's name from its waiting list's key
-- <ns>:{T}:q:<queue>, given the task prefix.
function FAIR.queue_of(tprefix, waiting)
  return string.sub(waiting, #tprefix - 2 + 3)
end

-- FAIR.policy reads a policy '<weight> <limit>[ <rate> <period ms>]' (nil,
-- or not one: the default d) as {w, lim, rate, period}.
function FAIR.policy(p, d)
  if type(p) ~= 'string' then
    return d
  end
  local w, l, r, per = string.match(p, '^(%d+) (%d+) (%d+) (%d+)$')
  if not w then
    w, l = string.match(p, '^(%d+) (%d+)$')
  end
  if not w then
    return d
  end
  return {w = tonumber(w), lim = tonumber(l), rate = tonumber(r) or 0, period = tonumber(per) or 0}
end

-- FAIR.rate_room is how many more tasks key x (of plan p) may start now
-- by its rate: its rate less the starts its log holds from the last period
-- (ZCOUNT, read once per take, nothing written) and those planned; or
-- left, for a key with no rate. nil when, with safe, its log is on another
-- cluster node (nothing was written). A key's log
-- <ns>:{T}:fl:<queue>:<key> holds one entry per start (pid, scored by
-- Redis time), written by FAIR.commit, which trims the entries past the
-- window first: the log never holds more than the rate's starts (at most
-- MaxKeyRate), so a trim is bounded.
function FAIR.rate_room(p, x, left, safe)
  if x.rate <= 0 or x.period <= 0 then
    return left
  end
  if not x.used then
    local n = redis.pcall('ZCOUNT', p.logp .. x.key, '(' .. (now_ms() - x.period), '+inf')
    if type(n) == 'table' and n.err then
      if safe and string.find(n.err, 'non local key', 1, true) then
        return nil
      end
      n = 0 -- not a zset (changed by hand): read as empty
    end
    x.used = n
  end
  return x.rate - x.used - x.plan
end

-- FAIR.ensure counts added ids that joined key okey's list, and puts the
-- key in the ring unless it is there or held by its limit. Called when
-- the list was empty before them; FAIR.count when it was not (the key is
-- not out then: every push goes through here).
function FAIR.ensure(ring, state, okey, added)
  local f = 's:' .. okey
  local r = redis.call('HMGET', state, f, FAIR.K, FAIR.N)
  local v = tonumber(r[1]) or 0
  local n = math.max(tonumber(r[3]) or 0, 0) + added
  if v % FAIR.CREDIT == FAIR.OUT then
    redis.call('HSET', state, f, v - v % FAIR.RUN + FAIR.IN, FAIR.K, math.max(tonumber(r[2]) or 0, 0) + 1, FAIR.N, n)
    redis.call('RPUSH', ring, okey)
  else
    redis.call('HSET', state, FAIR.N, n)
  end
end

-- FAIR.count adds delta to the ids in the keys' lists (FAIR.N, deleted at
-- 0: it undercounts only what was changed by hand).
function FAIR.count(state, delta)
  if delta ~= 0 and redis.call('HINCRBY', state, FAIR.N, delta) <= 0 then
    redis.call('HDEL', state, FAIR.N)
  end
end

-- FAIR.push puts task id of key okey back in its key's list, at the front
-- (given back, requeued) or at the back (made due again), as the queue's
-- waiting list would have it, and the key in the ring if it must be.
function FAIR.push(tprefix, qname, okey, id, front)
  local ring, state, listp = FAIR.names(tprefix, qname)
  if redis.call(front and 'LPUSH' or 'RPUSH', listp .. okey, id) == 1 then
    FAIR.ensure(ring, state, okey, 1)
  else
    FAIR.count(state, 1)
  end
end

-- FAIR.counted reports the key whose running count the taking pid of a
-- task counts in (its F_FAIR_KEY and F_FAIR_PID, read by the caller), or
-- nil: a task with no key, or a taking no fair take counted (a worker that
-- had not yet read that the queue is fair, or an older taking's mark).
function FAIR.counted(fk, fc, pid)
  if fk and fc and pid and fc == pid then
    return fk
  end
  return nil
end

-- FAIR.note adds one freed slot of key okey to freed ({order, n}), which
-- FAIR.free applies once per key at the end of the call.
function FAIR.note(freed, okey)
  if not okey then
    return
  end
  if not freed.n[okey] then
    freed.order[#freed.order + 1] = okey
    freed.n[okey] = 0
  end
  freed.n[okey] = freed.n[okey] + 1
end

-- FAIR.free gives back the slots noted in freed (one HINCRBY per key): a
-- key blocked by its limit goes back to the ring (its next take checks the
-- limit again); a key left with nothing is forgotten. Returns how many
-- keys went back to the ring, for the caller's wake-up.
function FAIR.free(tprefix, qname, freed)
  if #freed.order == 0 then
    return 0
  end
  local ring, state = FAIR.names(tprefix, qname)
  local woke = 0
  for _, okey in ipairs(freed.order) do
    local f = 's:' .. okey
    local v = redis.call('HINCRBY', state, f, -freed.n[okey] * FAIR.RUN)
    if v <= 0 then
      -- (Below 0 only if the state was changed by hand: forgotten.)
      redis.call('HDEL', state, f)
    elseif v % FAIR.CREDIT == FAIR.BLOCKED then
      redis.call('HINCRBY', state, f, FAIR.IN - FAIR.BLOCKED)
      redis.call('RPUSH', ring, okey)
      woke = woke + 1
    end
  end
  return woke
end

-- FAIR.pick reads the ring and plans a take of up to need tasks from the
-- keys' lists (the queue's waiting list was taken from first): deficit
-- round robin, each key within its limit. Returns the plan p: p.picks, one
-- per key served, in order: {key = k, list = its list, ids = the ids read
-- (popped; with safe, read only: the caller trims the lists)}; the rest is
-- for FAIR.commit. nil when, with safe, a key's list is on another
-- cluster node (a slot migration; nothing was written).
function FAIR.pick(tprefix, qname, need, safe)
  local ring, state, listp, timed, logp = FAIR.names(tprefix, qname)
  local p = {ring = ring, state = state, timed = timed, logp = logp, picks = {}, info = {}, q = {}, h = 1, tailq = {},
    short = false}
  local chunk = need + FAIR.SCAN
  local keys = redis.pcall('LRANGE', ring, 0, chunk - 1)
  if type(keys) == 'table' and keys.err then
    if safe and string.find(keys.err, 'non local key', 1, true) then
      return nil
    end
    return p -- a ring that is not a list (changed by hand) serves nobody
  end
  p.keys, p.whole = keys, #keys < chunk
  if #keys == 0 then
    -- (Keys waiting out their rate may be due: FAIR.commit looks.)
    p.tw = tonumber(redis.call('HGET', state, FAIR.TW))
    return p
  end
  -- (The queue's counts come with the states: the commit writes them.)
  local fields = {'p:', FAIR.N, FAIR.K, FAIR.TW}
  for _, key in ipairs(keys) do
    fields[#fields + 1] = 's:' .. key
    fields[#fields + 1] = 'p:' .. key
  end
  local r = redis.call('HMGET', state, unpack(fields))
  local d = FAIR.policy(r[1], {w = 1, lim = 0, rate = 0, period = 0})
  p.n, p.k, p.tw = math.max(tonumber(r[2]) or 0, 0), math.max(tonumber(r[3]) or 0, 0), tonumber(r[4])
  local seen = {}
  for i, key in ipairs(keys) do
    local v = tonumber(r[2 * i + 3]) or 0
    local pol = FAIR.policy(r[2 * i + 4], d)
    local x = {key = key, run = math.floor(v / FAIR.RUN), credit = math.floor((v % FAIR.RUN) / FAIR.CREDIT),
      was = v % FAIR.CREDIT, w = math.max(pol.w, 1), lim = pol.lim, rate = pol.rate, period = pol.period,
      plan = 0, got = 0}
    if seen[key] then
      x.gone = 'dup' -- (twice in the ring: changed by hand) served once
    end
    seen[key] = true
    p.info[i] = x
    p.q[i] = i
  end
  local left = need
  for _ = 1, FAIR.ROUNDS do
    -- Plan: the key at the front starts up to its credit (a new turn: its
    -- weight), within its limit; a key whose turn is over goes to the back
    -- (within this take too, when the ring was read whole).
    local q, info = p.q, p.info
    while left > 0 and p.h <= #q do
      local x = info[q[p.h]]
      if x.gone then
        p.h = p.h + 1
      else
        if x.credit <= 0 then
          x.credit = x.w
        end
        local room = x.lim > 0 and (x.lim - x.run - x.plan) or left
        local rroom = FAIR.rate_room(p, x, left, safe)
        if not rroom then
          return nil
        end
        if p.whole and p.h == #q and x.lim <= 0 and not (x.rate > 0 and x.period > 0) then
          -- The last key in turn, with no limit: turn after turn, it
          -- takes all that is left. In one step rather than one per turn
          -- (a lone key of weight 1 would loop once per task): it ends
          -- where the loop would, mid-turn or with its turn just over,
          -- still the ring's last.
          if left >= x.credit then
            local r = (left - x.credit) % x.w
            x.credit = r > 0 and x.w - r or 0
          else
            x.credit = x.credit - left
          end
          x.plan, left = x.plan + left, 0
        elseif room <= 0 then
          x.gone, x.full = 'full', true
          p.h = p.h + 1
        elseif rroom <= 0 then
          x.gone, x.credit = 'rated', 0
          p.h = p.h + 1
        else
          local n = math.min(x.credit, room, rroom, left)
          x.plan, x.credit, left = x.plan + n, x.credit - n, left - n
          if x.lim > 0 and x.lim - x.run - x.plan <= 0 then
            x.gone, x.full, x.credit = 'full', true, 0
            p.h = p.h + 1
          elseif x.rate > 0 and x.period > 0 and rroom - n <= 0 then
            x.gone, x.credit = 'rated', 0
            p.h = p.h + 1
          elseif x.credit == 0 then
            p.h = p.h + 1
            if p.whole then
              q[#q + 1] = q[p.h - 1]
            else
              p.tailq[#p.tailq + 1] = q[p.h - 1]
            end
          end
        end
      end
    end
    -- Read what was planned; a key whose list ran dry is out, and what it
    -- could not give is planned again among the others.
    local dry = false
    for i, x in ipairs(info) do
      if x.plan > x.got then
        local got
        if safe then
          got = redis.pcall('LRANGE', listp .. x.key, x.got, x.plan - 1)
        else
          got = redis.pcall('LPOP', listp .. x.key, x.plan - x.got)
        end
        if type(got) == 'table' and got.err then
          if safe and string.find(got.err, 'non local key', 1, true) then
            return nil
          end
          got = {} -- not a list (changed by hand): read as empty
        end
        got = got or {}
        if not x.pick then
          x.pick = {key = x.key, list = listp .. x.key, ids = {}}
          p.picks[#p.picks + 1] = x.pick
        end
        for _, id in ipairs(got) do
          x.pick.ids[#x.pick.ids + 1] = id
        end
        local want = x.plan - x.got
        x.got = x.got + #got
        if #got < want then
          left = left + x.plan - x.got
          x.plan, x.gone, x.dry, dry = x.got, 'dry', true, true
        end
      end
    end
    if left <= 0 or not dry then
      break
    end
  end
  -- Left short with keys not looked at (the ring is longer than was read,
  -- or the rounds ran out): the caller wakes the queue's workers.
  p.short = left > 0 and (not p.whole or p.h <= #p.q)
  return p
end

-- FAIR.put adds count field f, now v (was: old), to the fields a commit
-- sets, or deletes (at 0).
function FAIR.put(sets, dels, f, v, old)
  if v == old then
    return
  elseif v > 0 then
    sets[#sets + 1] = f
    sets[#sets + 1] = v
  else
    dels[#dels + 1] = f
  end
end

-- FAIR.commit records what the take did with plan p: taken[key] is how
-- many takings of the key it counted (ids it buried or put back are not),
-- back[key] how many it put back (the list holds them again). Writes each
-- served key's state (one HSET, one HDEL for the keys it forgets) and the
-- ring (the keys whose turn ended to the back; those now empty or at their
-- limit out). Returns whether a wake-up is owed (p.short).
function FAIR.commit(p, taken, back, starts)
  if not p.keys or #p.keys == 0 then
    return FAIR.due(p) > 0
  end
  local info, q = p.info, p.q
  -- Where each key stands now, and the queue's counts: the ids that left
  -- the keys' lists (popped, less those put back), the keys now out.
  local keep = {} -- info index -> true: in the ring
  local sets, dels = {}, {}
  local n, k = p.n, p.k
  for _, pick in ipairs(p.picks) do
    n = n - #pick.ids + (back[pick.key] or 0)
  end
  for i, x in ipairs(info) do
    local visited = x.plan > 0 or x.gone
    if visited and x.gone ~= 'dup' then
      local run = x.run + (taken[x.key] or 0)
      local work = not x.dry or (back[x.key] or 0) > 0
      local where = FAIR.IN
      if not work then
        where = FAIR.OUT
      elseif x.lim > 0 and run >= x.lim then
        where = FAIR.BLOCKED
      elseif x.rate > 0 and x.period > 0 and (x.used or 0) + #(starts[x.key] or {}) >= x.rate then
        where = FAIR.TIMED
      end
      x.where = where
      if (x.was == FAIR.OUT) ~= (where == FAIR.OUT) then
        k = k + (where == FAIR.OUT and -1 or 1)
      end
      local credit = (where == FAIR.IN and x.credit > 0 and x.credit < x.w) and x.credit or 0
      local v = run * FAIR.RUN + credit * FAIR.CREDIT + where
      if v == 0 then
        dels[#dels + 1] = 's:' .. x.key
      else
        sets[#sets + 1] = 's:' .. x.key
        sets[#sets + 1] = v
      end
      if where == FAIR.IN then
        keep[i] = true
      end
    end
  end
  FAIR.put(sets, dels, FAIR.N, n, p.n)
  FAIR.put(sets, dels, FAIR.K, k, p.k)
  FAIR.put(sets, dels, FAIR.TW, FAIR.log(p, starts), p.tw)
  if #sets > 0 then
    redis.call('HSET', p.state, unpack(sets))
  end
  if #dels > 0 then
    redis.call('HDEL', p.state, unpack(dels))
  end
  -- The ring: the part read goes, then what stays of it comes back in its
  -- new order (whole: the take's own rotation; else the keys not reached,
  -- still at the front, and those whose turn ended, at the back).
  local front, tail, placed = {}, {}, {}
  local function place(list, i)
    local x = info[i]
    if placed[x.key] then
      return
    end
    if keep[i] or not (x.plan > 0 or x.gone) then
      placed[x.key] = true
      list[#list + 1] = x.key
    end
  end
  for j = p.h, #q do
    place(p.whole and tail or front, q[j])
  end
  for _, i in ipairs(p.tailq) do
    place(tail, i)
  end
  for i, x in ipairs(info) do
    if keep[i] and not placed[x.key] then
      placed[x.key] = true
      tail[#tail + 1] = x.key -- given back after it ran dry, or under its limit again
    end
  end
  -- Written as the fewest changes: the entries read that leave the front
  -- (LTRIM), then those that join the back (RPUSH); a take that changes
  -- nothing (a lone key, in turn) writes nothing.
  local keys, cut = p.keys, nil
  if p.whole then
    -- The first c entries go; the rest must start tail.
    for c = 0, #keys do
      local same = #keys - c <= #tail
      for j = c + 1, #keys do
        if not same then
          break
        end
        same = keys[j] == tail[j - c]
      end
      if same then
        cut = c
        break
      end
    end
    front, tail = {}, {unpack(tail, #keys - cut + 1)}
  else
    cut = #keys - #front
    for j = 1, #front do
      if cut < 0 or keys[cut + j] ~= front[j] then
        cut = nil
        break
      end
    end
  end
  if cut then
    if cut > 0 then
      redis.call('LTRIM', p.ring, cut, -1)
    end
  else
    redis.call('LTRIM', p.ring, #keys, -1)
    local rev = {}
    for j = #front, 1, -1 do
      rev[#rev + 1] = front[j]
    end
    redis.call('LPUSH', p.ring, unpack(rev))
  end
  if #tail > 0 then
    redis.call('RPUSH', p.ring, unpack(tail))
  end
  return FAIR.due(p) > 0 or p.short
end

-- FAIR.log writes the starts of the keys of plan p that have a rate (their
-- pids, by key) to their rate logs, each trimmed of the entries past its
-- window first (ZREMRANGEBYSCORE: at most its rate's, see FAIR.rate_room),
-- and puts the keys the commit found at their rate (FAIR.TIMED) in the
-- zset of keys waiting out their rate, scored by when the oldest start in
-- their window leaves it. Returns the earliest such time known (the state
-- hash's FAIR.TW: a take that finds it past puts the due keys back).
function FAIR.log(p, starts)
  local now, tw = nil, p.tw
  local due = {}
  for _, x in ipairs(p.info) do
    local st = starts[x.key]
    if x.rate > 0 and x.period > 0 and x.gone ~= 'dup' and (st or x.where == FAIR.TIMED) then
      now = now or now_ms()
      local log = p.logp .. x.key
      if st and #st > 0 then
        redis.call('ZREMRANGEBYSCORE', log, '-inf', now - x.period)
        local entries = {}
        for _, spid in ipairs(st) do
          entries[#entries + 1] = now
          entries[#entries + 1] = spid
        end
        redis.call('ZADD', log, unpack(entries))
        redis.call('PEXPIRE', log, x.period)
      end
      if x.where == FAIR.TIMED then
        local first = redis.call('ZRANGEBYSCORE', log, '(' .. (now - x.period), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        local at = (tonumber(first[2]) or now) + x.period
        due[#due + 1] = at
        due[#due + 1] = x.key
        tw = math.min(tw or at, at)
      end
    end
  end
  if #due > 0 then
    redis.call('ZADD', p.timed, unpack(due))
  end
  return tw
end

-- FAIR.due puts the keys whose rate allows a start again back in the ring,
-- when the earliest of them is due (p.tw, read by FAIR.pick: nothing to do
-- otherwise): at most FAIR.SCAN per take, each still waiting out its rate,
-- at the ring's back; then records the next one's time. Returns how many
-- went back (the caller wakes the workers).
function FAIR.due(p)
  if not p.tw or p.tw > now_ms() then
    return 0
  end
  local keys = redis.call('ZRANGEBYSCORE', p.timed, '-inf', now_ms(), 'LIMIT', 0, FAIR.SCAN)
  local back, sets = {}, {}
  if #keys > 0 then
    redis.call('ZREM', p.timed, unpack(keys))
    local fields = {}
    for i, key in ipairs(keys) do
      fields[i] = 's:' .. key
    end
    local v = redis.call('HMGET', p.state, unpack(fields))
    for i, key in ipairs(keys) do
      local st = tonumber(v[i]) or 0
      if st % FAIR.CREDIT == FAIR.TIMED then
        sets[#sets + 1] = fields[i]
        sets[#sets + 1] = st - FAIR.TIMED + FAIR.IN
        back[#back + 1] = key
      end
    end
  end
  local first = redis.call('ZRANGE', p.timed, 0, 0, 'WITHSCORES')
  if first[2] then
    sets[#sets + 1] = FAIR.TW
    sets[#sets + 1] = first[2]
  else
    redis.call('HDEL', p.state, FAIR.TW)
  end
  if #sets > 0 then
    redis.call('HSET', p.state, unpack(sets))
  end
  if #back > 0 then
    redis.call('RPUSH', p.ring, unpack(back))
  end
  return #back
end

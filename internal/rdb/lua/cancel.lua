--- @include "codes"
--- @include "level"
--- @include "cfg"
--- @include "finalize"
--- @include "packed"
--- @include "fair"
-- cancel: end a waiting or scheduled task, or ask the owner of a running one
-- to stop.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:t:<id>             (hash) the task
-- KEYS[3] <ns>:{T}:s:<queue>          (zset) scheduled ids
-- KEYS[4] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[5] <ns>:{T}:done:<queue>       (zset) retained ended ids
-- KEYS[6] <ns>:{T}:lb:<prefix>        (hash) where the task waits if it was
--         loaded (packed, see packed.lua)
-- ARGV[1] task id   ARGV[2] cancel channel   ARGV[3] the task's field in KEYS[6]
-- Returns: 0 nothing to cancel (unknown, ended, dead, or already asked),
-- 1 removed from the queue or the scheduled set, 2 cancel asked of the
-- running owner, 3 refused: the task is a flow run or one of its children
-- (cancel the run instead), 4 marked where it waits, deep in a long list
-- (see list_remove): never run, it ends as cancelled when a take reaches
-- it.

-- CANCEL_WINDOW is how far from each end of a waiting list a cancel looks
-- for its task: LPOS and LREM compare every element they pass (about 13 ms
-- per million), and no call may hold Redis for long.
local CANCEL_WINDOW = 10000

-- list_remove removes id (an entry: a waiting list's id, or a key list's
-- id or id@due) from list (1) or reports that it is not there (0): a list
-- of at most two windows is searched whole, a longer one within
-- CANCEL_WINDOW of either end. When id is not found there it
-- reports -1: the caller then marks the task cancelled where it waits, and
-- the take that reaches it hands it out with attempt -1, never run, and its
-- end finalizes it as cancelled (see take.lua).
local function list_remove(list, id)
  if redis.call('LLEN', list) <= 2 * CANCEL_WINDOW then
    return redis.call('LREM', list, 1, id)
  end
  if redis.call('LPOS', list, id, 'MAXLEN', CANCEL_WINDOW) then
    return redis.call('LREM', list, 1, id)
  end
  if redis.call('LPOS', list, id, 'RANK', -1, 'MAXLEN', CANCEL_WINDOW) then
    return redis.call('LREM', list, -1, id)
  end
  return -1
end
local t = redis.pcall('HMGET', KEYS[2], F_STATE, F_CANCEL, F_UNIQUE, F_RUN_STATUS, F_PARENT, F_RETENTION, F_PRIORITY, F_KEY, F_FAIR_KEY)
if type(t) ~= 'table' or t.err then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- No hash: a loaded task may wait packed. It leaves the waiting list (a
  -- load writes to level 0) and ends cancelled like any waiting task, with
  -- a hash made from its packed payload.
  local p = redis.call('HGET', KEYS[6], ARGV[3])
  if not p then
    return 0
  end
  local removed = list_remove(KEYS[1], ARGV[1])
  if removed == 0 then
    return 0
  end
  redis.call('HDEL', KEYS[6], ARGV[3])
  if removed < 0 then
    -- Deep in a long list: marked where it waits (see list_remove).
    redis.call('HSET', KEYS[2], F_PAYLOAD, p, F_CANCEL, '1', F_STATE, S_CANCELLED)
    return 4
  end
  redis.call('HSET', KEYS[2], F_PAYLOAD, p)
  finalize(KEYS[2], ARGV[1], nil, S_CANCELLED, cfg_num(KEYS[4], 'retention', 0), '', KEYS[5], nil, nil)
  return 1
end
if t[2] then
  return 0
end
if t[4] or t[5] then
  return 3
end
local s = t[1]
if s == S_DONE or s == S_CANCELLED or s == S_DEAD or s == S_EXPIRED then
  return 0
end
if s ~= S_ACTIVE then
  local removed
  if s == S_SCHEDULED then
    removed = redis.call('ZREM', KEYS[3], ARGV[1])
  elseif t[9] then
    -- A fair queue's task waits in its key's list (its key keeps its place
    -- in turn: the take that finds the list empty takes it out).
    local tprefix = string.sub(KEYS[2], 1, #KEYS[2] - #ARGV[1])
    local _, state, listp = FAIR.names(tprefix, FAIR.queue_of(tprefix, KEYS[1]))
    removed = list_remove(listp .. t[9], ARGV[1])
    if removed == 1 then
      FAIR.count(state, -1)
    end
  else
    removed = list_remove(level_list(KEYS[1], t[7]), ARGV[1])
  end
  if removed <= 0 and t[8] then
    -- An ordered task behind its key's head waits in its key's list.
    local deep = removed < 0
    local list, entry, count = key_listed(KEYS[2], ARGV[1], t[8], KEYS[1])
    removed = list_remove(list, entry)
    if removed > 0 then
      key_behind(count, -removed)
    end
    if removed == 0 and deep then
      removed = -1
    end
  end
  if removed < 0 then
    -- Deep in a long list: marked where it waits (see list_remove); its
    -- unique key is free at once.
    release_unique(t[3], ARGV[1])
    redis.call('HSET', KEYS[2], F_CANCEL, '1', F_STATE, S_CANCELLED)
    return 4
  end
  if removed > 0 then
    finalize(KEYS[2], ARGV[1], t[3], S_CANCELLED, cfg_num(KEYS[4], 'retention', 0), '', KEYS[5], t[6], t[8])
    return 1
  end
end
-- Running, or held by a dead worker and about to be recovered: the finish
-- (or the recovery) of that taking sees the mark and ends it as cancelled.
redis.call('HSET', KEYS[2], F_CANCEL, '1')
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 2

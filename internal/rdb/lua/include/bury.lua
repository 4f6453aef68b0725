--- @include "codes"
--- @include "time"
--- @include "cfg"
--- @include "finalize"
--- @include "history"
-- bury_forget deletes dead task id; the head of a key (blocked) lets the
-- key's next task move up. UNLINK, not DEL: a dead flow run keeps the
-- records of every child it fanned out (tens of thousands of fields), and
-- DEL frees them one by one before it returns, where Redis frees a value
-- of more than 64 elements in its background thread.
local function bury_forget(deadkey, tprefix, id)
  local okey = redis.pcall('HGET', tprefix .. id, F_KEY)
  if type(okey) == 'string' then
    key_ended(tprefix .. id, id, okey, deadkey, 'dead:')
  end
  redis.call('UNLINK', tprefix .. id)
end

-- TRIM_DEAD is the most deletions of each kind trim_dead makes per call:
-- each deletes a task's hash and what its key holds, and no call may hold
-- Redis for more than a few milliseconds.
local TRIM_DEAD = 250

-- trim_dead enforces a dead set's caps (count, then age), at most limit
-- (default TRIM_DEAD) deletions of each kind per call. room (default 0) is
-- how many entries about to be added the count must leave room for: bury
-- trims before it adds, so that the entry it adds is never the one trimmed
-- (entries buried by one call share one time and ties break by id, and a
-- stage's end still writes its run's status into the hash it buries). It
-- returns true when a kind made limit deletions: more may be left.
local function trim_dead(deadkey, cfgkey, tprefix, room, limit)
  limit = limit or TRIM_DEAD
  local full = false
  local max = cfg_num(cfgkey, 'dead_max', DEFAULT_DEAD_MAX)
  local age = cfg_num(cfgkey, 'dead_age', DEFAULT_DEAD_AGE)
  local excess = redis.call('ZCARD', deadkey) + (room or 0) - max
  if excess > 0 then
    local old = redis.call('ZRANGE', deadkey, 0, math.min(excess, limit) - 1)
    for _, id in ipairs(old) do
      bury_forget(deadkey, tprefix, id)
    end
    if #old > 0 then
      redis.call('ZREM', deadkey, unpack(old))
    end
    full = excess > limit
  end
  local expired = redis.call('ZRANGEBYSCORE', deadkey, '-inf', now_ms() - age, 'LIMIT', 0, limit)
  if #expired > 0 then
    for _, id in ipairs(expired) do
      bury_forget(deadkey, tprefix, id)
    end
    redis.call('ZREM', deadkey, unpack(expired))
  end
  return full or #expired == limit
end

-- bury moves task id into the dead set with a reason, keeping its hash (no
-- expiry, no taking fields), releases its unique key and trims the set.
-- The head of a key stays its head (the key is blocked until the task is
-- requeued or deleted) unless the queue's config says its keys move on
-- (ondead = next). attempt, when given, is the failure count of the failed
-- attempt that buries it: the attempt goes into its history (see
-- history.lua), as dead, in the same HSET.
local function bury(deadkey, cfgkey, tprefix, id, reason, err, worker, attempt)
  local tkey = tprefix .. id
  local t = redis.call('HMGET', tkey, F_UNIQUE, F_KEY, F_STARTED, F_HISTORY_SEQ)
  release_unique(t[1], id)
  if t[2] and redis.call('HGET', cfgkey, 'ondead') == 'next' then
    key_ended(tkey, id, t[2], deadkey, 'dead:')
  end
  if attempt then
    redis.call('HSET', tkey, F_STATE, S_DEAD, F_DEAD_REASON, reason, F_DEAD_AT, now_ms(),
      history_pairs(t[4], attempt, t[3], 'dead', worker, err))
  else
    redis.call('HSET', tkey, F_STATE, S_DEAD, F_DEAD_REASON, reason, F_DEAD_AT, now_ms())
  end
  if err and err ~= '' then
    redis.call('HSET', tkey, F_ERROR, err)
  end
  if worker and worker ~= '' then
    redis.call('HSET', tkey, F_DEAD_WORKER, worker)
  end
  redis.call('HDEL', tkey, F_WORKER, F_PID, F_CANCEL)
  redis.call('PERSIST', tkey)
  -- (An entry of id, buried again, moves to now: out of the trim's way.)
  redis.call('ZREM', deadkey, id)
  trim_dead(deadkey, cfgkey, tprefix, 1)
  redis.call('ZADD', deadkey, now_ms(), id)
end

-- lib: functions shared by the scripts, prepended to each one when it is
-- loaded (Lua has no includes). Defaults match the Go defaults of package worqr
-- and apply only where no worker wrote the queue's config hash yet.
local DEFAULT_DEAD_MAX = 10000
local DEFAULT_DEAD_AGE = 90 * 24 * 3600 * 1000

local _now
-- now_ms: Redis server time in milliseconds, read once per script run.
local function now_ms()
  if not _now then
    local t = redis.call('TIME')
    _now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return _now
end

local function cfg_num(cfgkey, field, default)
  local v = tonumber(redis.call('HGET', cfgkey, field))
  return v or default
end

-- fix_type makes sure tkey is a hash (or absent). A key of another type
-- (corrupt data) is replaced by a hash keeping what it held ('raw' for a
-- string) and the reason is returned; nil when it was fine.
local function fix_type(tkey)
  local kind = redis.call('TYPE', tkey).ok
  if kind == 'hash' or kind == 'none' then
    return nil
  end
  local raw = ''
  if kind == 'string' then raw = redis.call('GET', tkey) end
  redis.call('DEL', tkey)
  redis.call('HSET', tkey, 'raw', raw)
  return 'corrupt: task data is a ' .. kind .. ', not a hash'
end

-- release_unique deletes unique key u if it still names task id.
local function release_unique(u, id)
  if u and u ~= '' then
    local holder = redis.pcall('GET', u)
    if holder == id then
      redis.call('DEL', u)
    end
  end
end

-- finalize ends a task (done or cancelled): its unique key is released and
-- its hash kept for retention ms, or deleted when retention is 0.
local function finalize(tkey, id, u, state, retention, result)
  release_unique(u, id)
  if retention > 0 then
    redis.call('HSET', tkey, 's', state, 'ft', now_ms())
    if result and result ~= '' then
      redis.call('HSET', tkey, 'r', result)
    end
    redis.call('HDEL', tkey, 'w', 'p')
    redis.call('PEXPIRE', tkey, retention)
  else
    redis.call('DEL', tkey)
  end
end

-- trim_dead enforces a dead set's caps (count, then age), at most 1000
-- deletions of each kind per call.
local function trim_dead(deadkey, cfgkey, tprefix)
  local max = cfg_num(cfgkey, 'dead_max', DEFAULT_DEAD_MAX)
  local age = cfg_num(cfgkey, 'dead_age', DEFAULT_DEAD_AGE)
  local excess = redis.call('ZCARD', deadkey) - max
  if excess > 0 then
    local old = redis.call('ZRANGE', deadkey, 0, math.min(excess, 1000) - 1)
    for _, id in ipairs(old) do
      redis.call('DEL', tprefix .. id)
    end
    redis.call('ZREM', deadkey, unpack(old))
  end
  local expired = redis.call('ZRANGEBYSCORE', deadkey, '-inf', now_ms() - age, 'LIMIT', 0, 1000)
  if #expired > 0 then
    for _, id in ipairs(expired) do
      redis.call('DEL', tprefix .. id)
    end
    redis.call('ZREM', deadkey, unpack(expired))
  end
end

-- bury moves task id into the dead set with a reason, keeping its hash (no
-- expiry, no taking fields), releases its unique key and trims the set.
local function bury(deadkey, cfgkey, tprefix, id, reason, err, worker)
  local tkey = tprefix .. id
  release_unique(redis.call('HGET', tkey, 'u'), id)
  redis.call('HSET', tkey, 's', 'dead', 'dr', reason, 'dt', now_ms())
  if err and err ~= '' then
    redis.call('HSET', tkey, 'e', err)
  end
  if worker and worker ~= '' then
    redis.call('HSET', tkey, 'dw', worker)
  end
  redis.call('HDEL', tkey, 'w', 'p', 'x')
  redis.call('PERSIST', tkey)
  redis.call('ZADD', deadkey, now_ms(), id)
  trim_dead(deadkey, cfgkey, tprefix)
end

-- index_expire gives run id's entries in the index zsets their expiry time
-- and lets each index key expire once every run in it has ended (running runs
-- are scored +inf).
local function index_expire(ixkeys, id, at)
  for _, ix in ipairs(ixkeys) do
    redis.call('ZADD', ix, 'XX', at, id)
    local top = redis.call('ZRANGE', ix, -1, -1, 'WITHSCORES')
    if top[2] and top[2] ~= 'inf' then
      redis.call('PEXPIREAT', ix, math.floor(tonumber(top[2])))
    end
  end
end

-- end_run ends flow run id with status (done, failed, cancelled): the run and
-- its index entries are kept for retention ms.
local function end_run(tkey, id, status, retention, ixkeys)
  local now = now_ms()
  redis.call('HSET', tkey, 'fs', status, 's', status, 'ft', now)
  redis.call('HDEL', tkey, 'w', 'p', 'x')
  redis.call('PEXPIRE', tkey, retention)
  index_expire(ixkeys, id, now + retention)
end

-- forward_run moves a run whose stage is complete to the back of the next
-- stage's queue with a wake-up, or ends it as done after the last stage.
-- Returns 7 (forwarded) or 1 (run done).
local function forward_run(tkey, id, nexts, pfx, retention, ixkeys)
  if nexts == '' then
    end_run(tkey, id, 'done', retention, ixkeys)
    return 1
  end
  redis.call('HSET', tkey, 'st', nexts, 's', 'queued')
  redis.call('HDEL', tkey, 'w', 'p', 'n', 'c', 'kp', 'e')
  redis.call('RPUSH', pfx.queue .. nexts, id)
  redis.call('PUBLISH', pfx.wake .. nexts, 1)
  return 7
end

-- stop_task takes task id (hash tkey) of queue qname out of its waiting list
-- or scheduled set, or, when it runs, marks it and tells its owner. Returns
-- true when it was taken out (nobody runs it).
local function stop_task(pfx, tkey, id, qname)
  local s = redis.call('HGET', tkey, 's')
  if s == 'active' then
    redis.call('HSET', tkey, 'x', '1')
    redis.call('PUBLISH', pfx.cancel .. qname, id)
    return false
  elseif s == 'scheduled' then
    redis.call('ZREM', pfx.sched .. qname, id)
  else
    redis.call('LREM', pfx.queue .. qname, 1, id)
  end
  return true
end

-- cancel_children stops every pending child of a run and records each as
-- cancelled in the run.
local function cancel_children(runkey, pfx, tprefix)
  local h = redis.call('HGETALL', runkey)
  for i = 1, #h, 2 do
    local f = h[i]
    if string.sub(f, 1, 2) == 'k:' and h[i + 1] == 'pending' then
      local cid = string.sub(f, 3)
      local q = redis.call('HGET', runkey, 'kq:' .. cid)
      if stop_task(pfx, tprefix .. cid, cid, q) then
        redis.call('DEL', tprefix .. cid)
      end
      redis.call('HSET', runkey, f, 'cancelled')
    end
  end
end

-- prefixes reads the sibling-queue and index prefixes from ARGV[i..i+4].
local function prefixes(i)
  return {queue = ARGV[i], wake = ARGV[i + 1], sched = ARGV[i + 2], cancel = ARGV[i + 3], index = ARGV[i + 4]}
end

-- index_keys returns the index keys of a run: one per declared property the
-- run was started with (<index prefix><prop>:<value>); flow_start keeps those
-- values in 'i:<prop>', so a stage rewriting the field does not move them.
local function index_keys(runkey, props, pfx)
  local keys = {}
  for _, prop in ipairs(props) do
    local v = redis.call('HGET', runkey, 'i:' .. prop)
    if v then
      table.insert(keys, pfx.index .. prop .. ':' .. v)
    end
  end
  return keys
end

-- list_from reads a count at ARGV[i] and that many values after it; returns
-- the values and the index after them.
local function list_from(i)
  local n = tonumber(ARGV[i])
  local out = {}
  for j = 1, n do
    out[j] = ARGV[i + j]
  end
  return out, i + n + 1
end

-- run_index_keys returns a run's index keys from the settings flow_start
-- stored on it ('fi': the indexed properties, comma-separated).
local function run_index_keys(runkey, pfx)
  local fi = redis.call('HGET', runkey, 'fi')
  local props = {}
  if fi and fi ~= '' then
    for p in string.gmatch(fi, '[^,]+') do
      table.insert(props, p)
    end
  end
  return index_keys(runkey, props, pfx)
end

-- child_ended counts the end of child cid in its run, once: done (result) or
-- failed (err, with the child's fan-out policy 'pf' and the run's next stage
-- 'pn', both stored on the child at fan-out). The run ends failed (fail-fast)
-- or moves on when this was its last pending child. Returns the run's
-- outcome: 0 unchanged, 1 done, 5 failed, 7 forwarded.
local function child_ended(runkey, runid, cid, ckey, ok, result, err, pfx, tprefix)
  local r = redis.call('HMGET', runkey, 'fs', 'k:' .. cid, 'fr')
  if r[1] ~= 'running' or r[2] ~= 'pending' then
    return 0
  end
  local c = redis.call('HMGET', ckey, 'pn', 'pf')
  local retention = tonumber(r[3]) or 86400000
  if ok then
    redis.call('HSET', runkey, 'k:' .. cid, 'done')
    if result and result ~= '' then
      redis.call('HSET', runkey, 'kr:' .. cid, result)
    end
  else
    redis.call('HSET', runkey, 'k:' .. cid, 'failed', 'ke:' .. cid, err)
    if c[2] ~= 'continue' then
      cancel_children(runkey, pfx, tprefix)
      end_run(runkey, runid, 'failed', retention, run_index_keys(runkey, pfx))
      return 5
    end
  end
  if redis.call('HINCRBY', runkey, 'kp', -1) > 0 then
    return 0
  end
  return forward_run(runkey, runid, c[1] or '', pfx, retention, run_index_keys(runkey, pfx))
end

-- buried_in_flow ends what a buried flow task leaves waiting: a stage run
-- ('fs' running) fails; a child ('pr') counts as failed in its run.
local function buried_in_flow(tkey, id, reason, pfx, tprefix)
  local t = redis.call('HMGET', tkey, 'fs', 'pr', 'fr')
  if t[1] == 'running' then
    redis.call('HSET', tkey, 'fs', 'failed', 'ft', now_ms())
    index_expire(run_index_keys(tkey, pfx), id, now_ms() + (tonumber(t[3]) or 86400000))
  elseif t[2] then
    child_ended(tprefix .. t[2], t[2], id, tkey, false, '', reason, pfx, tprefix)
  end
end

-- finish_one records the end of one taking if worker still owns pid (see
-- finish.lua for the modes and return codes).
local function finish_one(wq, pkey, tkey, sched, dead, cfg, tprefix, pid, id, worker, mode, delay, err, retention, result)
  if redis.call('SREM', wq, pid) == 0 then
    return 0
  end
  redis.call('DEL', pkey)
  local t = redis.pcall('HMGET', tkey, 'x', 'u')
  if t.err then
    bury(dead, cfg, tprefix, id, fix_type(tkey), '', worker)
    return 5
  end
  if t[1] then
    finalize(tkey, id, t[2], 'cancelled', retention, '')
    return 2
  end
  if mode == 'done' then
    finalize(tkey, id, t[2], 'done', retention, result)
    return 1
  end
  redis.call('HINCRBY', tkey, 'n', 1)
  if mode == 'retry' then
    redis.call('HSET', tkey, 's', 'scheduled', 'e', err)
    redis.call('HDEL', tkey, 'w', 'p')
    redis.call('ZADD', sched, now_ms() + tonumber(delay), id)
    return 4
  end
  bury(dead, cfg, tprefix, id, 'failed', err, worker)
  return 5
end

-- requeue_pids puts the takings pids (numbers) back at the front of queue,
-- oldest first, and deletes their processing lists. A task whose cancel was
-- asked ends as cancelled; a flow run that ended meanwhile is left as it is;
-- crashed counts a crash on each. Returns requeued, cancelled.
local function requeue_pids(pids, queue, cfg, pprefix, tprefix, crashed)
  -- pids number takings in the order tasks left the queue: push the newest
  -- first so that the oldest ends up at the very front.
  table.sort(pids)
  local requeued, cancelled = 0, 0
  for i = #pids, 1, -1 do
    local pkey = pprefix .. pids[i]
    local id = redis.call('LINDEX', pkey, 0)
    redis.call('DEL', pkey)
    if id then
      local tkey = tprefix .. id
      local t = redis.pcall('HMGET', tkey, 'x', 'u', 's', 'fs')
      if t.err then
        -- Corrupt data: requeue the id; the take buries it with the reason.
        redis.call('LPUSH', queue, id)
        requeued = requeued + 1
      elseif t[4] and t[4] ~= 'running' then
        -- A flow run that ended (cancelled) while this taking ran: keep it.
        redis.call('HDEL', tkey, 'w', 'p')
      elseif t[1] then
        finalize(tkey, id, t[2], 'cancelled', cfg_num(cfg, 'retention', 0), '')
        cancelled = cancelled + 1
      elseif t[3] == 'active' then
        if crashed then
          redis.call('HINCRBY', tkey, 'c', 1)
        end
        redis.call('HSET', tkey, 's', 'queued')
        redis.call('HDEL', tkey, 'w', 'p')
        redis.call('LPUSH', queue, id)
        requeued = requeued + 1
      end
    end
  end
  return requeued, cancelled
end


--- @include "codes"
--- @include "time"
--- @include "key"
--- @include "fair"
-- enqueue_key: enqueue tasks with a key on an ordered queue, in order. A
-- task becomes its key's head when the key has none (at the back of the
-- waiting list, or scheduled), else it waits in the key's list. When the
-- queue merges (cfg merge = 1) and the key's last task is still waiting,
-- the task's payload merges into it instead (Lowkiq's rule: payloads in
-- score order, an equal payload once with the lower score; the waiting
-- task keeps its attempts and due time) and no task is added.
-- KEYS[1]      <ns>:{T}:q:<queue>        (list) waiting ids
-- KEYS[2]      <ns>:{T}:s:<queue>        (zset) scheduled ids
-- KEYS[3]      <ns>:{T}:kh:<queue>       (hash) key -> head id
-- KEYS[4]      <ns>:{T}:k:<queue>:<key>  (list) the key's ids behind its head
-- KEYS[5]      <ns>:{T}:cfg:<queue>      (hash) queue settings
-- KEYS[6]      <ns>:{T}:fq:<queue>:<key> (list) a fair queue's: the key's waiting ids
-- KEYS[7]      <ns>:{T}:fr:<queue>       (list) a fair queue's keys in turn
-- KEYS[8]      <ns>:{T}:fs:<queue>       (hash) a fair queue's keys' states
-- KEYS[9..n+8] <ns>:{T}:t:<id>           (hash) one per new task
-- The hash of the key's waiting tail (a merge target) cannot be declared
-- (its id is read here); it is built from ARGV[1], in KEYS[1]'s slot.
-- ARGV[1] task key prefix   ARGV[2] the key
-- ARGV[3] delay ms, relative to Redis time ("" = none)
-- ARGV[4] due time in unix ms ("" = none)
-- ARGV[5] max attempts override ("")   ARGV[6] timeout override ms ("")
-- ARGV[7] mode: "add"; "read": return the waiting tail {id, payload,
--         merge version} or {} and change nothing; "into": replace the
--         payload of the waiting tail ARGV[8] at merge version ARGV[9] by
--         the one payload given (a merge done by the caller), or, when
--         ARGV[8] is "" and the key has no waiting tail, add the task
-- ARGV[10] the tasks' own retention ms ("" = the queue's)
-- ARGV[11] their deadline, unix ms ("" = none): taken at or after it, a
--          task ends as expired without running (its key moves on)
-- ARGV[12] n, then n ids, n payloads, n scores ("" = Redis time in ms)
-- then three more: the step's number in a keyed batch sent in steps ("" =
--         a call of its own), its guard's TTL ms, and "1" for the batch's
--         last step. With a step, the last key is <ns>:{T}:eb:<batch>
--         (string), the guard of the batch: step
--         k > 0 is applied only when it says step k-1 was (else {-5},
--         nothing written); each step applied writes its number there, the
--         batch's last deletes it (mode "add" only). So a client whose reply
--         was lost closes the guard and reads how far the batch got.
-- then one more: the new tasks' metadata ("" = none; opaque), stored
--         beside each one's payload (F_META) and handed out with it by the
--         take. A merge keeps the waiting task's metadata.
-- A merge keeps the waiting task's own retention and deadline.
-- On a fair queue (cfg fair = 1) a key orders nothing and merges nothing:
-- each task joins the back of its key's list (or, delayed, the scheduled
-- set, which the mover empties into the key's list), and the key joins the
-- ring of keys in turn unless it is there or held by its limit (fair.lua).
-- Its hash carries the key as F_FAIR_KEY (F_KEY is an ordered queue's).
-- A fair queue may gate its keys' enqueues (cfg one, db, dbm, thr:
-- KeyPolicy.Singleton, Debounce, DebounceMax, Throttle; mode "add", and
-- "into" when it adds): the
-- state hash names each key's latest task gated ('o:<key>'), and its own
-- hash says whether it still holds its place (read here, never kept up by
-- the scripts that end tasks: a hash gone or ended holds none). An enqueue
-- answered by that task adds nothing and returns its id as merged: with
-- db, while the task still waits out its debounce (scheduled, never
-- taken, F_GATED set) the enqueue replaces its payload and metadata
-- and moves its due time to the later of now + db and the call's, but not
-- past F_GATED + dbm (dbm > 0); with one, while it waits or runs;
-- with thr, while it waits or the key started its rate (KeyLimits.Rate
-- in the last Period, from its rate log, whatever became of the task). A new gated task is the key's
-- latest, with F_GATED (when its first enqueue came); with db it is
-- scheduled at now + db (or the call's due time, when later). The end of
-- a gated task (done, dead, cancelled or expired, ending.lua) drops the
-- key's pointer when it still names the task, so that keys that come no
-- more leave no field (a throttle's stays: it answers while the key's rate
-- log is full); other removals leave it to the next enqueue.
-- Returns: 2 values per task: the id that holds its payload (its own, or
-- the waiting task it merged into) and 1 when merged, else 0. In mode
-- "into", {-4} when the tail changed since it was read (nothing written).
local tprefix, okey, mode = ARGV[1], ARGV[2], ARGV[7]
local qname = key_queue_of(tprefix, KEYS[1], 'q:')
local heads, list = KEYS[3], KEYS[4]
local base = string.sub(tprefix, 1, #tprefix - 2)
if mode == 'read' then
  local tail = key_tail(tprefix, heads, list, okey)
  if not tail then
    return {}
  end
  local t = redis.call('HMGET', tprefix .. tail, F_PAYLOAD, F_MERGE_VERSION)
  return {tail, t[1] or '', t[2] or '0'}
end
local n = tonumber(ARGV[12])
local step = ARGV[13 + 3 * n] or ''
step = step ~= '' and tonumber(step)
if step and (step > 0 and redis.call('GET', KEYS[#KEYS]) ~= tostring(step - 1) or
    step == 0 and redis.call('EXISTS', KEYS[#KEYS]) == 1) then
  -- (Step 0 finds a guard only when the client closed it: its reply was
  -- taken for lost, and the batch ends before it.)
  return {-5}
end
local due
if ARGV[3] ~= '' then
  due = now_ms() + tonumber(ARGV[3])
elseif ARGV[4] ~= '' then
  due = tonumber(ARGV[4])
end
if mode == 'into' then
  local tail = key_tail(tprefix, heads, list, okey)
  if (tail or '') ~= ARGV[8] then
    return {-4}
  end
  if tail then
    local ttkey = tprefix .. tail
    local t = redis.call('HMGET', ttkey, F_PAYLOAD, F_MERGE_VERSION)
    local _, have = env_decode(t[1])
    if (t[2] or '0') ~= ARGV[9] or not have then
      return {-4}
    end
    -- The caller merged into the last payload (Task.Payload): it alone is
    -- replaced; the tail's other payloads (merged by the queue's
    -- KeyPolicy.Merge) stay.
    have[#have] = {s = have[#have].s, p = ARGV[14]}
    redis.call('HSET', ttkey, F_PAYLOAD, env_encode(okey, have))
    redis.call('HINCRBY', ttkey, F_MERGE_VERSION, 1)
    return {tail, 1}
  end
end
local meta = ARGV[16 + 3 * n] or ''
local c = redis.call('HMGET', KEYS[5], 'merge', 'fair', 'one', 'db', 'dbm', 'thr')
local fair = c[2] == '1'
local merging = mode == 'add' and c[1] == '1' and not fair
local gate = {one = c[3] == '1', db = tonumber(c[4]) or 0, dbm = tonumber(c[5]) or 0, thr = c[6] == '1'}
-- (Mode "into" gets here only to add a task: EnqueueMerge on a fair
-- queue, which has no tail to merge into, is gated as an add is.)
if not (fair and mode ~= 'read' and (gate.one or gate.db > 0 or gate.thr)) then
  gate = nil
end

-- held returns the key's latest gated task when it answers an enqueue of
-- entry (see above), having replaced its payload for a debounce. The rate
-- log is the key's, not the task's: a throttle reads it even when that
-- task's hash is gone (a retention of 0 deletes it as it ends).
local function held(entry)
  local oid = redis.call('HGET', KEYS[8], 'o:' .. okey)
  if not oid then
    return nil
  end
  local okkey = tprefix .. oid
  local t = redis.call('HMGET', okkey, F_STATE, F_STARTED, F_GATED, F_FAIR_KEY)
  -- (A hash gone, or not this key's: changed by hand, holds no place.)
  if t[4] == okey then
    local waiting = t[1] == S_QUEUED or t[1] == S_SCHEDULED
    if gate.db > 0 and t[1] == S_SCHEDULED and not t[2] and t[3] and redis.call('ZSCORE', KEYS[2], oid) then
      local at = math.max(due or 0, now_ms() + gate.db)
      if gate.dbm > 0 then
        at = math.min(at, tonumber(t[3]) + gate.dbm)
      end
      redis.call('ZADD', KEYS[2], at, oid)
      redis.call('HSET', okkey, F_PAYLOAD, env_encode(okey, {entry}))
      if meta ~= '' then
        redis.call('HSET', okkey, F_META, meta)
      else
        redis.call('HDEL', okkey, F_META)
      end
      return oid
    end
    if gate.one and (waiting or t[1] == S_ACTIVE) or gate.thr and waiting then
      return oid
    end
  end
  if gate.thr then
    local pol = redis.call('HMGET', KEYS[8], 'p:' .. okey, 'p:')
    pol = FAIR.policy(pol[1], FAIR.policy(pol[2], {w = 1, lim = 0, rate = 0, period = 0}))
    if pol.rate > 0 and pol.period > 0 then
      local _, _, _, _, logp = FAIR.names(tprefix, qname)
      if redis.call('ZCOUNT', logp .. okey, '(' .. (now_ms() - pol.period), '+inf') >= pol.rate then
        return oid
      end
    end
  end
  return nil
end
local fair_ids = {} -- a fair queue's tasks due now, for the key's list
local entries = {}
for i = 1, n do
  local score = ARGV[12 + 2 * n + i]
  if score == '' then
    score = tostring(now_ms())
  end
  entries[i] = {s = score, p = ARGV[12 + n + i]}
end
local out = {}
local behind = 0 -- the tasks added behind the key's head (key_behind)
local i = 1
while i <= n do
  local id = ARGV[12 + i]
  -- The tasks of this call that merge into the key's waiting tail merge
  -- together: its envelope is read and written once for all of them, not
  -- once each, so a call copies it once however many of its tasks merge.
  local tail = merging and key_tail(tprefix, heads, list, okey)
  local merged = tail and key_merge_run(tprefix, tail, okey, entries, i) or 0
  local holder = gate and held(entries[i])
  if holder then
    out[#out + 1] = holder
    out[#out + 1] = 1
    i = i + 1
  elseif merged > 0 then
    for _ = 1, merged do
      out[#out + 1] = tail
      out[#out + 1] = 1
    end
    i = i + merged
  else
    local entry = entries[i]
    local tkey = KEYS[8 + i]
    local now = gate and now_ms()
    if gate then
      redis.call('HSET', tkey, F_PAYLOAD, env_encode(okey, {entry}), F_FAIR_KEY, okey, F_GATED, now)
    else
      redis.call('HSET', tkey, F_PAYLOAD, env_encode(okey, {entry}), fair and F_FAIR_KEY or F_KEY, okey)
    end
    if ARGV[5] ~= '' then redis.call('HSET', tkey, F_MAX_ATTEMPTS, ARGV[5]) end
    if ARGV[6] ~= '' then redis.call('HSET', tkey, F_TIMEOUT, ARGV[6]) end
    if ARGV[10] ~= '' then redis.call('HSET', tkey, F_RETENTION, ARGV[10]) end
    if ARGV[11] ~= '' then redis.call('HSET', tkey, F_DEADLINE, ARGV[11]) end
    if meta ~= '' then redis.call('HSET', tkey, F_META, meta) end
    local tdue = due
    if gate then
      redis.call('HSET', KEYS[8], 'o:' .. okey, id)
      if gate.db > 0 then
        tdue = math.max(due or 0, now + gate.db)
      end
    end
    if not fair then
      if not key_add(tprefix, base, qname, heads, list, okey, id, due) then
        behind = behind + 1
      end
    elseif tdue then
      redis.call('HSET', tkey, F_STATE, S_SCHEDULED)
      redis.call('ZADD', KEYS[2], tdue, id)
    else
      redis.call('HSET', tkey, F_STATE, S_QUEUED)
      fair_ids[#fair_ids + 1] = id
    end
    out[#out + 1] = id
    out[#out + 1] = 0
    i = i + 1
  end
end
key_behind(base .. 'kn:' .. qname, behind)
if #fair_ids > 0 then
  -- A key whose list held ids already is in the ring, or held by its
  -- limit (fair.lua): only a key that had none is looked at.
  if redis.call('RPUSH', KEYS[6], unpack(fair_ids)) == #fair_ids then
    FAIR.ensure(KEYS[7], KEYS[8], okey, #fair_ids)
  else
    FAIR.count(KEYS[8], #fair_ids)
  end
  redis.call('PUBLISH', base .. 'wake:' .. qname, #fair_ids)
end
if step then
  if ARGV[15 + 3 * n] == '1' then
    redis.call('DEL', KEYS[#KEYS])
  else
    redis.call('SET', KEYS[#KEYS], step, 'PX', ARGV[14 + 3 * n])
  end
end
return out

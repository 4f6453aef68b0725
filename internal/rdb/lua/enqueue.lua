--- @include "codes"
--- @include "time"
--- @include "packed"
-- enqueue: write task hashes and push their ids at the back of a queue (or
-- into its scheduled set when delayed), then publish one wake-up carrying the
-- number of tasks made available. The caller splits large batches (Go:
-- rdb.MaxEnqueueChunk), so that one call never holds Redis for long.
-- KEYS[1]      <ns>:{T}:q:<queue>     (list)  waiting ids (of the priority
--              level: <ns>:{T}:q:<queue>:<level> for a level > 0)
-- KEYS[2]      <ns>:{T}:s:<queue>     (zset)  scheduled ids by due time (ms)
-- KEYS[3..n+2] <ns>:{T}:t:<id>        (hash)  one per task
-- then the unique locks <ns>:{T}:u:<queue>:<key> (string, holding a task
--              id): one when ARGV[4] is "1"; one per distinct position
--              named in the per-task indexes when ARGV[4] is "b"
-- then, when ARGV[8] is "1": <ns>:{T}:lb:<prefix> (hash) where a loaded
--              task with that id would wait packed (see packed.lua), and
--              <ns>:{T}:id:<queue>:<id> (string) the caller-chosen id's
--              lock, holding the payload's digest (last)
-- or, when ARGV[15] is not "": <ns>:{T}:eb:<batch> (string, last) the
--              guard of a batch sent in steps, or of one call (step 0,
--              not last): its last step applied
-- ARGV[1] wake channel
-- ARGV[2] delay ms, relative to Redis time ("" = none)
-- ARGV[3] due time in unix ms ("" = none)
-- ARGV[4] unique locks: "" none; "1" one lock for the whole call (all or
--         nothing); "b" one lock per task that names one (a task whose
--         lock is held is left out, the others are enqueued)
-- ARGV[5] unique TTL ms
-- ARGV[6] max attempts override ("" = queue default)
-- ARGV[7] timeout override in ms ("" = queue default)
-- ARGV[8] "1": one task with a caller-chosen id (idempotent enqueue)
-- ARGV[9] its lock's TTL ms   ARGV[10] the payload's digest
-- ARGV[11] deadline in unix ms, Redis time ("" = none): a task taken at or
--         after it is not run, it ends as expired
-- ARGV[12] retention ms of the task once ended ("" = the queue's)
-- ARGV[13] n, the number of tasks
-- ARGV[14] the tasks' priority level ("" = 0, the plain waiting list)
-- ARGV[15] the step's number in a batch sent in steps ("" = no guard):
--         step n > 0 is applied only when the guard says step n-1 was
--         (else {-5}, nothing written), so that the steps sent behind one
--         Redis refused change nothing; step 0 only where no guard is (the
--         client closed it: its reply was taken for lost)
-- ARGV[16] "1": the batch's last step (it deletes the guard)
-- ARGV[17] the guard's TTL ms
-- ARGV[18] the tasks' metadata ("" = none; opaque, at most MaxMetaBytes
--         as the client checks), stored beside each payload (F_META) and
--         handed out with it by the take
-- ARGV[19..n+18] task ids, in KEYS order;  ARGV[n+19..2n+18] payloads;
-- with "b": ARGV[2n+19..3n+18] per task, the position of its unique lock
--         among the declared locks (1-based; 0 = none)
-- Returns: {n} on success; {-1, holder id} when the one unique key is held;
-- {-2} when this id was enqueued before with the same payload digest (an
-- enqueue retried after its reply was lost: nothing new); {-3} when it was
-- enqueued before with another payload (or a loaded task with this id
-- waits packed); {-5} a step whose step before was not applied. Nothing is
-- written unless the enqueue succeeds. With "b": {m, i, holder, ...}: m
-- tasks enqueued, and for each task left out its position i in the call
-- (1-based) and the id holding its lock (a task earlier in the same call,
-- maybe).
local n = tonumber(ARGV[13])
local first = 19
local step = ARGV[15] ~= '' and tonumber(ARGV[15])
if step and (step > 0 and redis.call('GET', KEYS[#KEYS]) ~= tostring(step - 1) or
    step == 0 and redis.call('EXISTS', KEYS[#KEYS]) == 1) then
  -- (Step 0 finds a guard only when the client closed it: its reply was
  -- taken for lost, and the batch ends before it.)
  return {-5}
end
local idlock = nil
if ARGV[8] == '1' then
  idlock = KEYS[#KEYS]
end
if idlock then
  local prev = redis.call('GET', idlock)
  if prev then
    if prev == ARGV[10] then
      -- Written again as it is: the call then replicates, so that a WAIT
      -- after it on this connection (the caller waits for replicas) covers
      -- the first enqueue, whose reply may have been lost on another one.
      redis.call('SET', idlock, prev, 'KEEPTTL')
      return {-2}
    end
    return {-3}
  end
  -- The lock is gone (IDTTL passed), but a task with this id still
  -- exists (waiting, scheduled, running, retried, dead, kept for its
  -- retention, or cancelled where it waits deep in its queue: see
  -- cancel.lua), or a loaded one waits packed: the id is taken. Writing
  -- over it would leave one id in two places.
  local _, field = packed_split(ARGV[first])
  if redis.call('EXISTS', KEYS[3]) == 1 or redis.call('HEXISTS', KEYS[#KEYS - 1], field) == 1 then
    return {-3}
  end
end
local mode = ARGV[4]
local keep = {} -- positions of the tasks to write
local dups = {}
if mode == '1' then
  local unique = KEYS[3 + n]
  if not redis.call('SET', unique, ARGV[first], 'PX', ARGV[5], 'NX') then
    return {-1, redis.call('GET', unique)}
  end
end
for i = 1, n do
  local at = mode == 'b' and tonumber(ARGV[first + 2 * n + i - 1]) or 0
  if at > 0 then
    local ukey = KEYS[2 + n + at]
    if redis.call('SET', ukey, ARGV[first + i - 1], 'PX', ARGV[5], 'NX') then
      keep[#keep + 1] = i
    else
      dups[#dups + 1] = i
      dups[#dups + 1] = redis.call('GET', ukey)
    end
  else
    keep[#keep + 1] = i
  end
end
if idlock and #keep > 0 then
  -- (A task left out, its unique key held, is not enqueued: its id is not
  -- remembered, or a repeat would say it was.)
  redis.call('SET', idlock, ARGV[10], 'PX', ARGV[9])
end
local due
if ARGV[2] ~= '' then
  due = now_ms() + tonumber(ARGV[2])
elseif ARGV[3] ~= '' then
  due = tonumber(ARGV[3])
end
-- The fields every task of the call shares.
local extra = {}
if ARGV[6] ~= '' then extra[#extra + 1] = F_MAX_ATTEMPTS; extra[#extra + 1] = ARGV[6] end
if ARGV[7] ~= '' then extra[#extra + 1] = F_TIMEOUT; extra[#extra + 1] = ARGV[7] end
if ARGV[11] ~= '' then extra[#extra + 1] = F_DEADLINE; extra[#extra + 1] = ARGV[11] end
if ARGV[12] ~= '' then extra[#extra + 1] = F_RETENTION; extra[#extra + 1] = ARGV[12] end
if ARGV[14] ~= '' then extra[#extra + 1] = F_PRIORITY; extra[#extra + 1] = ARGV[14] end
if ARGV[18] ~= '' then extra[#extra + 1] = F_META; extra[#extra + 1] = ARGV[18] end
-- An id of the caller's says nothing of when it was enqueued (worqr's ids
-- carry it): its task keeps the time.
if idlock then extra[#extra + 1] = F_ENQUEUED_AT; extra[#extra + 1] = now_ms() end
if due then extra[#extra + 1] = F_STATE; extra[#extra + 1] = S_SCHEDULED end
local ids = {}
for _, i in ipairs(keep) do
  local tkey = KEYS[i + 2]
  local id = ARGV[first + i - 1]
  ids[#ids + 1] = id
  if mode == '1' then
    redis.call('HSET', tkey, F_PAYLOAD, ARGV[first + n + i - 1], F_UNIQUE, KEYS[3 + n], unpack(extra))
  elseif mode == 'b' and tonumber(ARGV[first + 2 * n + i - 1]) > 0 then
    redis.call('HSET', tkey, F_PAYLOAD, ARGV[first + n + i - 1],
      F_UNIQUE, KEYS[2 + n + tonumber(ARGV[first + 2 * n + i - 1])], unpack(extra))
  else
    redis.call('HSET', tkey, F_PAYLOAD, ARGV[first + n + i - 1], unpack(extra))
  end
  if due then
    redis.call('ZADD', KEYS[2], due, id)
  end
end
local out = {#ids}
if mode == 'b' then
  for _, v in ipairs(dups) do
    out[#out + 1] = v
  end
end
-- A step of a batch in steps lets the next one in (last: a step that
-- failed half way does not).
local function stepped()
  if not step then
    return
  end
  if ARGV[16] == '1' then
    redis.call('DEL', KEYS[#KEYS])
  else
    redis.call('SET', KEYS[#KEYS], step, 'PX', ARGV[17])
  end
end
if due or #ids == 0 then
  stepped()
  return out
end
-- RPUSH in chunks: Lua's unpack is limited to a few thousand values.
local i = 1
while i <= #ids do
  local j = math.min(i + 999, #ids)
  redis.call('RPUSH', KEYS[1], unpack(ids, i, j))
  i = j + 1
end
redis.call('PUBLISH', ARGV[1], #ids)
stepped()
return out

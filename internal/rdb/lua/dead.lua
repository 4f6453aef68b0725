--- @include "codes"
--- @include "bytes"
--- @include "flow"
--- @include "level"
--- @include "key"
--- @include "fair"
-- dead: requeue or delete tasks of a queue's dead set.
-- KEYS[1] <ns>:{T}:dead:<queue>       (zset) dead ids
-- KEYS[2] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4..] <ns>:{T}:t:<id>           (hash) with "ids": each task, declared
--         (the script reaches them from ARGV[2]); with "oldest" the ids are
--         read here and their hashes cannot be declared
-- ARGV[1] "requeue" | "delete"   ARGV[2] task key prefix   ARGV[3] wake channel
-- ARGV[4] index key prefix of the tag (a requeued flow run is indexed as
--         running again)
-- ARGV[5] "ids" followed by ids in ARGV[6..], or "oldest" followed by a count
-- in ARGV[6], then a cursor: the id in ARGV[7] ("" for none) and its score
-- in ARGV[8]. That many of the oldest entries after the cursor, the last
-- id this script refused before: the entries before it are those refused
-- (the others left the set). A cursor that left the set meanwhile
-- (deleted by another client, or trimmed by the dead set's caps, which
-- take the oldest first) is passed by its score: the entries from that
-- score on, some refused before maybe seen again. ARGV[9], when given and
-- not "", is a time (unix ms): only the entries dead before it are read, so
-- that a pass over the whole set (RequeueAllDead) never meets again the
-- tasks it requeued that died again meanwhile, and ends even while they
-- keep dying.
-- A requeued task goes to the back of the queue (of its priority level)
-- with its attempt and crash counts reset. A task of an ordered queue (one
-- with a key) goes back under its key (see key_requeue); a deleted one that
-- blocked its key lets the key's next task move up. A flow child goes back
-- into its run, which waits for it again, when the run still waits for its
-- other children (it went on past a failed child: ContinueOnChildFailure);
-- else (the run failed with it, was cancelled, or moved on) its requeue is
-- refused: it would run and its result be thrown away. It stays dead.
-- A call stops early at its byte bound (at least one entry is handled), so
-- that no call holds Redis for more than a few ms whatever the payloads
-- weigh: once the payload bytes its merges copy pass COPY_BYTES, or those
-- its deletes free pass FREE_BYTES. The entries after the last one read
-- stay where they are, for the next call.
-- Returns: {the number of tasks handled, the number of entries read, the
-- score of the last id refused ("" for none), 1 when the call stopped at
-- its byte bound (else 0), then the ids refused}.
local ids
if ARGV[5] == 'oldest' then
  local n = tonumber(ARGV[6])
  local from = 0
  if ARGV[7] ~= '' then
    from = redis.call('ZRANK', KEYS[1], ARGV[7])
  end
  if from then
    if ARGV[7] ~= '' then
      from = from + 1
    end
    ids = redis.call('ZRANGE', KEYS[1], from, from + n - 1)
  else
    ids = redis.call('ZRANGE', KEYS[1], ARGV[8], '+inf', 'BYSCORE', 'LIMIT', 0, n)
  end
  local before = tonumber(ARGV[9] or '')
  if before and #ids > 0 then
    -- (In score order: the first entry dead at or after it ends the read.)
    local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
    for i = 1, #ids do
      if tonumber(scores[i]) >= before then
        for j = #ids, i, -1 do
          ids[j] = nil
        end
        break
      end
    end
  end
else
  ids = {}
  for i = 6, #ARGV do
    table.insert(ids, ARGV[i])
  end
end
-- back_in_run puts a dead child back among the children its run waits
-- for, and says whether it could (see above). A task that is no child
-- needs nothing.
local function back_in_run(tkey, id)
  local parent, gen, err = child_of(tkey)
  if err or not parent then
    return true
  end
  local runkey = ARGV[2] .. parent
  local r = redis.pcall('HMGET', runkey, F_RUN_STATUS, F_STATE, 'k:' .. id, 'kg')
  if r.err or r[1] ~= R_RUNNING or r[2] ~= S_CHILDREN or r[3] ~= 'failed' or r[4] ~= gen then
    -- (Corrupt run data, a run that moved on, or one waiting for a later
    -- fan-out: a child of an earlier one would count in the wrong one.)
    return false
  end
  redis.call('HSET', runkey, 'k:' .. id, 'pending')
  redis.call('HDEL', runkey, 'ke:' .. id)
  redis.call('HINCRBY', runkey, F_PENDING, 1)
  return true
end

-- COPY_BYTES bounds the bytes a call's merges read and write (a
-- requeued task of an ordered queue that merges joins its key's waiting
-- tail: both envelopes are read and their merge written, in the script),
-- FREE_BYTES those its deletes free (cheaper per byte).
local merging = ARGV[1] ~= 'delete' and redis.call('HGET', KEYS[3], 'merge') == '1'
local qname = key_queue_of(ARGV[2], KEYS[2], 'q:')
local copied, freed, cut = 0, 0, 0

-- over says whether task id (hash tkey) would take the call past its byte
-- bound, and counts its bytes when not.
local function over(tkey, id)
  if ARGV[1] == 'delete' then
    local b = (tonumber(redis.pcall('HSTRLEN', tkey, F_PAYLOAD)) or 0) +
      (tonumber(redis.pcall('HSTRLEN', tkey, F_RESULT)) or 0)
    if freed > 0 and freed + b > FREE_BYTES then
      return true
    end
    freed = freed + b
    return false
  end
  if not merging then
    return false
  end
  local okey = redis.pcall('HGET', tkey, F_KEY)
  if type(okey) ~= 'string' then
    return false
  end
  local b = tonumber(redis.pcall('HSTRLEN', tkey, F_PAYLOAD)) or 0
  local heads, list = key_names(ARGV[2], qname, okey)
  local tail = key_tail(ARGV[2], heads, list, okey)
  if tail and tail ~= id then
    b = b + (tonumber(redis.pcall('HSTRLEN', ARGV[2] .. tail, F_PAYLOAD)) or 0)
  end
  if copied > 0 and copied + b > COPY_BYTES then
    return true
  end
  copied = copied + b
  return false
end

local handled, push, refused = {}, {}, {}
local fair_back = 0 -- fair queues' tasks put back in their keys' lists
local read = #ids
for i, id in ipairs(ids) do
  local tkey = ARGV[2] .. id
  if over(tkey, id) then
    read, cut = i - 1, 1
    break
  end
  if ARGV[1] ~= 'delete' and redis.call('ZSCORE', KEYS[1], id) and not back_in_run(tkey, id) then
    table.insert(refused, id)
  elseif redis.call('ZREM', KEYS[1], id) == 1 then
    local keys = redis.pcall('HMGET', tkey, F_KEY, F_FAIR_KEY)
    local okey, fkey
    if type(keys) == 'table' and not keys.err then
      okey, fkey = keys[1], keys[2]
    end
    if ARGV[1] == 'delete' then
      key_ended(tkey, id, okey, KEYS[1], 'dead:')
      -- (UNLINK: a wide hash, a dead run's child records, is freed aside;
      -- see bury_forget.)
      redis.call('UNLINK', tkey)
    else
      redis.call('HSET', tkey, F_STATE, S_QUEUED)
      redis.call('HDEL', tkey, F_FAILURES, F_CRASHES, F_DEAD_REASON, F_DEAD_AT, F_DEAD_WORKER, F_UNIQUE, F_CRASHED_ON)
      if redis.call('HEXISTS', tkey, F_RUN_STATUS) == 1 then
        -- A failed flow run resumes: running again, and indexed as such.
        redis.call('HSET', tkey, F_RUN_STATUS, R_RUNNING)
        redis.call('HDEL', tkey, F_FINISHED_AT)
        for _, ix in ipairs(run_index_keys(tkey, {index = ARGV[4]})) do
          redis.call('ZADD', ix, 'inf', id)
          redis.call('PERSIST', ix)
        end
      end
      if fkey then
        -- A fair queue's task: at the back of its key's list (fair.lua).
        FAIR.push(ARGV[2], qname, fkey, id, false)
        fair_back = fair_back + 1
      elseif not okey or key_requeue(tkey, id, okey, KEYS[2], KEYS[3]) then
        table.insert(push, id)
      end
    end
    table.insert(handled, id)
  end
end
if #push > 0 then
  local plain = push_by_level(KEYS[2], ARGV[2], push)
  if #plain > 0 then
    redis.call('RPUSH', KEYS[2], unpack(plain))
  end
end
if #push + fair_back > 0 then
  redis.call('PUBLISH', ARGV[3], #push + fair_back)
end
local last = ''
if #refused > 0 then
  last = redis.call('ZSCORE', KEYS[1], refused[#refused])
end
return {#handled, read, last, cut, unpack(refused)}

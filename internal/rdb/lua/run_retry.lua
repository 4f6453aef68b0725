--- @include "codes"
--- @include "flow"
-- run_retry: run a failed flow run again from the stage it failed in (the
-- stage its hash names): a stage that went dead leaves its dead set; a
-- stage whose fan-out failed (a child failed for good, fail-fast) runs
-- again and fans out anew. The failed fan-out's records ('k:', 'kq:',
-- 'kr:', 'ke:' per child) are forgotten, those of earlier stages' fan-outs
-- kept; the run's fan-out number ('kg') stays, so no child of the failed
-- fan-out can rejoin the run (dead.lua), and one still running ends as
-- cancelled (end.lua finds no record of it).
-- The run is running again, waiting at the back of the stage's queue with
-- its attempt and crash counts reset, kept with no expiry and indexed as
-- running, as a requeue from the dead set does.
-- KEYS[1] <ns>:{F}:t:<run id>         (hash) the run
-- ARGV[1] run id   ARGV[2] dead prefix <ns>:{F}:dead:
-- ARGV[3..7] queue, wake, scheduled, cancel, index prefixes of the tag
-- The stage's queue, dead set and the run's index keys cannot be
-- declared: they are read from KEYS[1].
-- Returns: 1 retried, 0 not failed (unknown, running, done or cancelled).
local t = redis.call('HMGET', KEYS[1], F_RUN_STATUS, F_STAGE)
if t[1] ~= R_FAILED or not t[2] then
  return 0
end
local id, stage = ARGV[1], t[2]
local pfx = prefixes(ARGV, 3)
-- A run whose stage went dead is in that stage's dead set: the stage
-- failed before it fanned out, and every child record is an earlier
-- stage's (later stages read them as Run.Children): all are kept. Else a
-- child failed the run (fail-fast) and only its fan-out is forgotten.
local failed_fanout = redis.call('ZREM', ARGV[2] .. stage, id) == 0
local drop = {}
local kl = failed_fanout and latest_kl(KEYS[1])
if kl then
  -- The failed fan-out listed its children ('kl', kept by the fail-fast
  -- end): exactly their records go, read by name (at most MaxChildren).
  for cid in string.gmatch(kl, '[^ ]+') do
    drop[#drop + 1] = 'k:' .. cid
    drop[#drop + 1] = 'kq:' .. cid
    drop[#drop + 1] = 'kr:' .. cid
    drop[#drop + 1] = 'ke:' .. cid
  end
elseif failed_fanout then
  -- (A run failed before its fan-out was listed.) The failed fan-out's
  -- children are those of the stage's child queues (a child queue
  -- belongs to one stage of a flow): the queues of the
  -- children it cancelled (pending when it failed) and of the child that
  -- failed it (dead, its hash naming the run's latest fan-out). When none
  -- can be told (that child's hash purged, and none pending), every child
  -- record goes.
  -- A run has at most MaxChildren (1,000) children per fan-out.
  local h = redis.call('HGETALL', KEYS[1])
  local status, queue, gen = {}, {}, nil
  for i = 1, #h, 2 do
    local f = h[i]
    if string.sub(f, 1, 2) == 'k:' then
      status[string.sub(f, 3)] = h[i + 1]
    elseif string.sub(f, 1, 3) == 'kq:' then
      queue[string.sub(f, 4)] = h[i + 1]
    elseif f == 'kg' then
      gen = h[i + 1]
    end
  end
  local tprefix = string.sub(KEYS[1], 1, #KEYS[1] - #id)
  local qs, known = {}, false
  for cid, st in pairs(status) do
    local mine = st == 'cancelled'
    if st == 'failed' then
      local parent, g = child_of(tprefix .. cid)
      mine = parent == id and g == gen
    end
    if mine and queue[cid] then
      qs[queue[cid]] = true
      known = true
    end
  end
  for cid in pairs(status) do
    if not known or qs[queue[cid] or ''] then
      drop[#drop + 1] = 'k:' .. cid
      drop[#drop + 1] = 'kq:' .. cid
      drop[#drop + 1] = 'kr:' .. cid
      drop[#drop + 1] = 'ke:' .. cid
    end
  end
end
for i = 1, #drop, 1000 do
  redis.call('HDEL', KEYS[1], unpack(drop, i, math.min(i + 999, #drop)))
end
redis.call('HDEL', KEYS[1], F_FINISHED_AT, F_WORKER, F_PID, F_CANCEL, F_FAILURES, F_CRASHES, F_ERROR, F_CRASHED_ON,
  F_PENDING, F_DEAD_REASON, F_DEAD_AT, F_DEAD_WORKER, 'kl')
redis.call('HSET', KEYS[1], F_RUN_STATUS, R_RUNNING, F_STATE, S_QUEUED)
redis.call('PERSIST', KEYS[1])
for _, ix in ipairs(run_index_keys(KEYS[1], pfx)) do
  redis.call('ZADD', ix, 'inf', id)
  redis.call('PERSIST', ix)
end
redis.call('RPUSH', pfx.queue .. stage, id)
redis.call('PUBLISH', pfx.wake .. stage, 1)
return 1

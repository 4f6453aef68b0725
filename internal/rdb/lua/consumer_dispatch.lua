--- @include "codes"
--- @include "consumer"
-- consumer_dispatch: advance an indexed consumer's processed index over its
-- finished indexes, put back the task of the index that holds progress up
-- when it is gone (cancelled, or its dead entry purged), and dispatch new
-- indexes up to the head as tasks of the consumer's queue: one task per
-- index, id and payload the index, pushed at the back in index order. It
-- dispatches index i only while i <= head, i < processed + max ahead, and
-- fewer than max processing indexes are dispatched and not done; so the
-- limits hold for every process of the consumer together. `next` only
-- grows, so processes that race dispatch each index once.
-- KEYS[1] <ns>:{C}:cs:<queue>  (hash)  processed, next
-- KEYS[2] <ns>:{C}:cd:<queue>  (set)   finished indexes at or above processed
-- KEYS[3] <ns>:{C}:q:<queue>   (list)  waiting ids
-- ARGV[1] the first index (when no progress is stored)
-- ARGV[2] the head: the highest index with a job ("" = none yet)
-- ARGV[3] max processing   ARGV[4] max search ahead
-- ARGV[5] at most this many dispatches and advance steps per call
-- ARGV[6] task key prefix <ns>:{C}:t:   ARGV[7] the queue's wake channel
-- Touches undeclared t:<index> keys (the indexes are read from KEYS[1]).
-- Returns: {processed, next, dispatched (incl. a put back), finished above
-- processed, more}: more is 1 when the call stopped at its bound and should
-- be called again.
local bound = tonumber(ARGV[5])
local processed, nxt = consumer_state(KEYS[1], tonumber(ARGV[1]))
local more
processed, more = consumer_advance(KEYS[2], processed, bound)
if nxt < processed then
  nxt = processed
end
local sent = 0
if not more and processed < nxt then
  local id = cidx(processed)
  if redis.call('EXISTS', ARGV[6] .. id) == 0 then
    redis.call('HSET', ARGV[6] .. id, F_PAYLOAD, id)
    redis.call('LPUSH', KEYS[3], id)
    sent = 1
  end
end
local finished = redis.call('SCARD', KEYS[2])
local inflight = nxt - processed - finished
local ahead = tonumber(ARGV[4])
local maxproc = tonumber(ARGV[3])
local ids = {}
if ARGV[2] ~= '' then
  local head = tonumber(ARGV[2])
  local n = 0
  while nxt <= head and nxt < processed + ahead and inflight < maxproc do
    if n == bound then
      more = true
      break
    end
    local id = cidx(nxt)
    local tkey = ARGV[6] .. id
    -- A task of this id exists only if the progress was rewound by hand:
    -- that task is the index's one run.
    if redis.call('EXISTS', tkey) == 0 then
      redis.call('HSET', tkey, F_PAYLOAD, id)
      ids[#ids + 1] = id
    end
    nxt = nxt + 1
    inflight = inflight + 1
    n = n + 1
  end
end
if #ids > 0 then
  redis.call('RPUSH', KEYS[3], unpack(ids))
end
sent = sent + #ids
if sent > 0 then
  redis.call('PUBLISH', ARGV[7], sent)
end
redis.call('HSET', KEYS[1], 'processed', cidx(processed), 'next', cidx(nxt))
return {processed, nxt, sent, finished, more and 1 or 0}

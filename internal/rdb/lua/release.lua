--- @include "requeue"
-- release: put back at the front of the queue the takings a live worker holds
-- in it but does not know about (a take whose reply was lost on the way), so
-- that no taking stays held by a worker that will never finish it. Takings
-- in ARGV[3..] (the ones the worker runs) are kept.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:wq:<queue>:<w>     (hash) pid -> task id worker w holds
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:done:<queue>       (zset) retained ended ids
-- KEYS[5] <ns>:{T}:seq                (string) taking counter of the tag
-- ARGV[1] wake channel   ARGV[2] task key prefix
-- ARGV[3..] pids the worker knows it holds
-- Returns: {requeued, cancelled, seq, missing...}: cancelled lists the
-- takings ended as cancelled (their cancel was asked) instead of put back,
-- id and pid of each, and '' (the worker is the caller's), flat; seq is
-- the tag's taking counter, so every taking recorded before this call (a
-- hand-off whose message is still on its way, say) has a pid at most seq;
-- missing are the pids of ARGV[3..] that KEYS[2] does not hold (ended, or
-- lost: a take the old primary acknowledged and never passed on before a
-- failover). Idempotent.
local known = {}
for i = 3, #ARGV do
  known[ARGV[i]] = true
end
local held = {}
local present = {}
local all = redis.call('HGETALL', KEYS[2])
for j = 1, #all, 2 do
  present[all[j]] = true
  if not known[all[j]] then
    redis.call('HDEL', KEYS[2], all[j])
    held[#held + 1] = {pid = tonumber(all[j]), id = all[j + 1]}
  end
end
local requeued, cancelled, woke = requeue_pids(held, KEYS[1], KEYS[3], KEYS[4], ARGV[2], false)
if requeued + woke > 0 then
  redis.call('PUBLISH', ARGV[1], requeued + woke)
end
local out = {requeued, cancelled, tonumber(redis.call('GET', KEYS[5]) or '0')}
for i = 3, #ARGV do
  if not present[ARGV[i]] then
    out[#out + 1] = ARGV[i]
  end
end
return out

--- @include "codes"
--- @include "time"
--- @include "packed"
-- load: one chunk of a bulk load, applied together with the load's
-- checkpoint so that every input line is enqueued exactly once however often
-- a chunk is sent (a reply lost after Redis applied it, a loader killed and
-- started again with --resume). The checkpoint holds the number of the next
-- input line to load; a chunk is applied only when it starts there. The
-- tasks are written packed (see packed.lua): their payloads go into the
-- shared hashes of their ids, with no hash per task.
-- KEYS[1]      <ns>:{T}:q:<queue>            (list) waiting ids
-- KEYS[2]      <ns>:{T}:ld:<queue>:<load>    (hash) the checkpoint
-- KEYS[3..]    <ns>:{T}:lb:<prefix>          (hash) the chunk's packed hashes
-- ARGV[1] wake channel
-- ARGV[2] the chunk's first line number (1-based)
-- ARGV[3] the line number after the chunk's last line (lines without a task,
--         such as empty ones, count too)
-- ARGV[4] fingerprint of the input (a digest of its first line)
-- ARGV[5] most waiting tasks before the chunk is refused ("0" = no limit)
-- ARGV[6] the checkpoint's TTL ms
-- ARGV[7] a digest of the chunk's last line (a resumed load checks it)
-- ARGV[8] task key prefix (<ns>:{T}:t:)
-- ARGV[9..n+8] task ids;  ARGV[n+9..] payloads, in the same order
-- Returns {1, next} applied; {0, next} applied before (nothing written);
-- {-1, next} the checkpoint is at another line (an earlier chunk was not
-- applied); {-2, waiting} the queue holds too many waiting tasks;
-- {-3} another input was loaded under this name; {-4, id} a loaded task with
-- one of these ids is waiting. Nothing is written unless the chunk is
-- applied.
local n = (#ARGV - 8) / 2
local first, after = tonumber(ARGV[2]), tonumber(ARGV[3])
local cp = redis.call('HMGET', KEYS[2], 'next', 'fp')
local at = tonumber(cp[1]) or 1
if cp[2] and cp[2] ~= ARGV[4] then
  return {-3}
end
if at >= after then
  return {0, at}
end
if at ~= first then
  return {-1, at}
end
local limit = tonumber(ARGV[5])
if limit > 0 then
  local waiting = redis.call('LLEN', KEYS[1])
  if waiting >= limit then
    return {-2, waiting}
  end
end
local tp = ARGV[8]
if n > 0 then
  local order, groups = packed_group(tp, ARGV, 9, n)
  -- No id may wait packed already (a chunk of another load with the same
  -- ids: never from Client.Load, whose ids carry a number drawn for each
  -- run): one HMGET per hash. Task hashes are not looked at: a loaded id
  -- is never an id a take has made a hash for (see PROTOCOL "Bulk loads").
  for _, key in ipairs(order) do
    local g = groups[key]
    local had = redis.call('HMGET', key, unpack(g.fields))
    for j = 1, #g.fields do
      if had[j] then
        return {-4, ARGV[8 + g.at[j]]}
      end
    end
  end
  packed_write(order, groups, KEYS[1], ARGV, 9, n)
end
redis.call('HSET', KEYS[2], 'next', after, 'fp', ARGV[4], 'tail', ARGV[7], 'at', now_ms())
redis.call('HINCRBY', KEYS[2], 'tasks', n)
redis.call('PEXPIRE', KEYS[2], ARGV[6])
if n > 0 then
  redis.call('PUBLISH', ARGV[1], n)
end
return {1, after}

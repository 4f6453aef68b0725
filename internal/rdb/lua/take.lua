-- take: pop up to ARGV[2] task ids from the front of a queue and record that
-- worker ARGV[1] owns each taking.
-- KEYS[1] <ns>:{T}:q:<queue>          (list) waiting ids
-- KEYS[2] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[3] <ns>:{T}:h:<queue>          (set)  workers that may hold takings
-- KEYS[4] <ns>:{T}:seq                (string) taking counter of the tag
-- ARGV[1] worker id   ARGV[2] max count
-- ARGV[3] task key prefix   ARGV[4] processing list prefix
-- Every key built from a prefix shares KEYS[1]'s hash tag.
-- Returns: flat array {id, pid, payload, attempt, ...}; empty when the queue
-- is empty. An id whose task hash is missing is dropped and returned with
-- pid "" so the caller can report it; it is owned by nobody.
local ids = redis.call('LPOP', KEYS[1], ARGV[2])
if not ids then
  return {}
end
local last = redis.call('INCRBY', KEYS[4], #ids)
local pid = last - #ids
local out = {}
local pids = {}
for _, id in ipairs(ids) do
  pid = pid + 1
  local tkey = ARGV[3] .. id
  local t = redis.call('HMGET', tkey, 'd', 'n')
  if not t[1] then
    table.insert(out, id)
    table.insert(out, '')
    table.insert(out, '')
    table.insert(out, 0)
  else
    local attempt = (tonumber(t[2]) or 0) + 1
    local spid = tostring(pid)
    redis.call('HSET', tkey, 's', 'active', 'n', attempt, 'w', ARGV[1], 'p', spid)
    redis.call('RPUSH', ARGV[4] .. spid, id)
    table.insert(pids, spid)
    table.insert(out, id)
    table.insert(out, spid)
    table.insert(out, t[1])
    table.insert(out, attempt)
  end
end
if #pids > 0 then
  redis.call('SADD', KEYS[2], unpack(pids))
  redis.call('SADD', KEYS[3], ARGV[1])
end
return out

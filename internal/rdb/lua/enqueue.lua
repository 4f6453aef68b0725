-- enqueue: write task hashes and push their ids at the back of a queue, then
-- publish one wake-up carrying the number of new tasks.
-- KEYS[1]      <ns>:{T}:q:<queue>     (list)  waiting ids
-- KEYS[2..n+1] <ns>:{T}:t:<id>        (hash)  one per task
-- ARGV[1]      wake channel
-- ARGV[2..n+1] task ids, in KEYS order
-- ARGV[n+2..]  payloads, in KEYS order
-- Returns: the number of tasks written.
local n = #KEYS - 1
for i = 1, n do
  redis.call('HSET', KEYS[i + 1], 'd', ARGV[n + 1 + i])
end
-- RPUSH in chunks: Lua's unpack is limited to a few thousand values.
local i = 2
while i <= n + 1 do
  local j = math.min(i + 999, n + 1)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('PUBLISH', ARGV[1], n)
return n

-- consumer: what the indexed consumer's scripts share. Indexes are whole
-- numbers below 2^53 (Lua numbers are doubles), always written with
-- cidx: Redis would format a large number argument as 1e+15.
local C_LOST, C_RECORDED, C_ALREADY, C_UNKNOWN = 0, 1, 2, 3

local function cidx(n)
  return string.format('%d', n)
end

-- consumer_state reads the progress hash: the processed index (every index
-- below it is done) and the next index to dispatch; first when unset.
local function consumer_state(statekey, first)
  local st = redis.call('HMGET', statekey, 'processed', 'next')
  local processed = tonumber(st[1]) or first
  local nxt = tonumber(st[2]) or processed
  if nxt < processed then
    nxt = processed
  end
  return processed, nxt
end

-- consumer_advance moves processed over the finished indexes that follow
-- it, removing them from the done set, at most steps of them. Returns the
-- new processed index and whether it stopped at its bound.
local function consumer_advance(donekey, processed, steps)
  local n = 0
  while n < steps do
    if redis.call('SREM', donekey, cidx(processed)) == 0 then
      return processed, false
    end
    processed = processed + 1
    n = n + 1
  end
  return processed, redis.call('SISMEMBER', donekey, cidx(processed)) == 1
end

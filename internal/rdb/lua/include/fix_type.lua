--- @include "codes"
-- fix_type makes sure tkey is a hash (or absent). A key of another type
-- (corrupt data) is replaced by a hash keeping what it held (F_RAW for a
-- string) and the reason is returned; nil when it was fine.
local function fix_type(tkey)
  local kind = redis.call('TYPE', tkey).ok
  if kind == 'hash' or kind == 'none' then
    return nil
  end
  local raw = ''
  if kind == 'string' then raw = redis.call('GET', tkey) end
  redis.call('DEL', tkey)
  redis.call('HSET', tkey, F_RAW, raw)
  return 'corrupt: task data is a ' .. kind .. ', not a hash'
end

-- time: Redis server time in milliseconds, read once per script run.
-- _call is the run's scratch (nil until the run reads the time; the
-- function library resets it before every call): ms, the time, and what
-- other includes keep per run (finalize: trims, see RETAIN_TRIM; flow:
-- ixtrims, see INDEX_TRIM). One upvalue for all of it: a Lua function may
-- have at most 60, and end's has nearly as many.
local _call
local function now_ms()
  if not _call then
    local t = redis.call('TIME')
    _call = {ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
  end
  return _call.ms
end

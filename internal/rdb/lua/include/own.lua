-- own: the ownership check, the one place it is written. A worker owns a
-- taking exactly while the pid is a field of its worker-queue hash; taking
-- it out is the check. Returns false, having changed nothing, for a caller
-- that no longer owns the taking (a zombie).
local function own(wq, pid)
  return redis.call('HDEL', wq, pid) == 1
end

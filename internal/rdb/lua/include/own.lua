-- own: the ownership check, the one place it is written. A worker owns a
-- taking exactly while the pid is in its worker-queue set; taking it out is
-- the check. Returns false, having changed nothing, for a caller that no
-- longer owns the taking (a zombie).
local function own(wq, pkey, pid)
  if redis.call('SREM', wq, pid) == 0 then
    return false
  end
  redis.call('DEL', pkey)
  return true
end

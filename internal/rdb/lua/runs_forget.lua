-- runs_forget: drop from a flow's list of runs the given ids whose run is
-- gone (no hash), checked here, in the same step: a caller read them gone,
-- but a run of the same id may have been started since (RunOpts.ID, once
-- the earlier run of that id expired), and dropping it then would hide a
-- live run from the list for good (flow_start lists a run once, when it
-- starts).
-- KEYS[1]    <ns>:{F}:runs            (zset) every run id by start time
-- KEYS[2..]  <ns>:{F}:t:<id>          (hash) each run, aligned with ARGV
-- ARGV[1..]  the run ids
-- Returns: how many ids it dropped.
local n = 0
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n

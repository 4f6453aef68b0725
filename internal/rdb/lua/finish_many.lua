-- finish_many: finish several takings of one queue in one step (group commit
-- of concurrent finishes); each is checked and recorded exactly as finish.lua
-- does, and gets its own return code.
-- KEYS[1] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[2] <ns>:{T}:dead:<queue>       (zset) dead ids
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- ARGV[1] task key prefix   ARGV[2] processing list prefix
-- ARGV[3] worker-queue set prefix (<ns>:{T}:wq:<queue>:)
-- ARGV[4..] 8 values per taking: worker id, pid, task id, mode, retry delay
--           ms, error text, retention ms, result
-- Returns: one code per taking, in order (see finish.lua).
local out = {}
for i = 4, #ARGV, 8 do
  local w, pid, id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  table.insert(out, finish_one(ARGV[3] .. w, ARGV[2] .. pid, ARGV[1] .. id,
    KEYS[1], KEYS[2], KEYS[3], ARGV[1], pid, id, w, ARGV[i + 3], ARGV[i + 4],
    ARGV[i + 5], tonumber(ARGV[i + 6]), ARGV[i + 7]))
end
return out

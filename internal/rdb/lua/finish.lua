-- finish: record the end of a taking, only if the caller still owns it.
-- KEYS[1] <ns>:{T}:wq:<queue>:<w>     (set)  pids worker w holds in this queue
-- KEYS[2] <ns>:{T}:p:<pid>            (list) processing list of the taking
-- KEYS[3] <ns>:{T}:t:<id>             (hash) the task
-- KEYS[4] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[5] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[6] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- ARGV[1] pid   ARGV[2] task id   ARGV[3] worker id
-- ARGV[4] mode: "done" | "retry" | "dead"
-- ARGV[5] retry delay ms (mode retry)   ARGV[6] error text (retry, dead)
-- ARGV[7] retention ms of ended tasks (0 = delete at once)
-- ARGV[8] result (mode done)   ARGV[9] task key prefix
-- Returns: 0 lost (not the owner: nothing changed), 1 done, 2 cancelled (a
-- cancel was asked while it ran; it wins over every mode), 4 retry
-- scheduled, 5 dead.
return finish_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[9],
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8])

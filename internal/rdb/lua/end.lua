--- @include "codes"
--- @include "time"
--- @include "ending"
--- @include "take"
-- end: the one way a taking ends. Ends a batch of takings of one queue (group
-- commit), each checked for ownership on its own and answered on its own:
-- done, retry, dead, give back, and for flows a stage's forward or fan-out
-- and a child's end. A cancel asked while a taking ran wins over what the
-- handler said.
-- KEYS[1] <ns>:{T}:s:<queue>          (zset) scheduled ids by due time
-- KEYS[2] <ns>:{T}:dead:<queue>       (zset) dead ids by time of death
-- KEYS[3] <ns>:{T}:cfg:<queue>        (hash) queue settings
-- KEYS[4] <ns>:{T}:q:<queue>          (list) waiting ids (give back)
-- KEYS[5] <ns>:{T}:done:<queue>       (zset) retained ended ids by finish time
-- KEYS[6] <ns>:{T}:h:<queue>          (set)  workers that may hold takings
-- KEYS[7] <ns>:{T}:seq                (string) taking counter of the tag
-- KEYS[8] <ns>:{T}:wq:<queue>:<w>     (hash) pid -> id the taking worker holds
-- then per taking, in ARGV order:
--   <ns>:{T}:wq:<queue>:<w> (hash), <ns>:{T}:t:<id> (hash), and for a child
--   its run <ns>:{T}:t:<run id> (hash), for a batch each member's hash
-- then the keys the stage ends write by name, declared so that a cluster
-- checks them before the script runs (the script reaches them from the
-- prefixes in ARGV): per stage taking, its next stage's queue
-- <ns>:{T}:q:<next> when it fans out nothing, else each child's hash
-- <ns>:{T}:t:<child> and each child queue <ns>:{T}:q:<child queue>
-- then, when the take parks (END.park > 0: it may park the worker), the park
-- hash <ns>:{T}:park:<queue>, last
-- ARGV: the layout LAYOUT.END (endArgv in end.go): task_prefix, wake_channel (the
--   queue's), the tag's queue .. index prefixes, retention (ms of ended
--   tasks, 0 = delete at once), then a take's fields (takeFields in
--   take.go) to take again, after the ends, as the take script would:
--   max (0 = take nothing), worker (KEYS[8]'s), deadline (nothing is taken
--   at or past it), max_crashes, kind, safe, levels, limited, batch, park,
--   park_ms (see take_tasks). With limited (the queue may have global
--   limits), ends that free slots not taken again are announced on the
--   wake channel.
-- ARGV[END.N + 1 ..] per taking, a record: a size n, then n values: the
--   layout REC (endRecord in end.go): kind (task | stage | child | batch),
--   worker id, pid, task id, ask (done | retry | dead | back | expire |
--   cancel), retry delay ms, error text, result; then the kind's tail:
--   a child's REC_CHILD (its run id); a stage's REC_STAGE (its next stage,
--   "" after the last, its fan-out policy, failfast | continue, the run
--   retention ms), then three counted lists: indexed properties, state
--   field/value pairs ("f:" names), the children fanned out (FANOUT values
--   each: id, queue, payload and metadata, "" for none); a batch's (a key's
--   head and the tasks taken behind it, ended together) REC_BATCH (a count
--   m), then m MEMBER values (pid, id, result); it declares its members'
--   hashes <ns>:{T}:t:<id> after the head's.
-- Returns: the layout END_REPLY (endReply in end.go): ends (per taking, an
-- ENDED row: its outcome, OUT_*, OUT_LOST when not the owner: nothing
-- changed; and, for a child, its run's, OUT_LOST when unchanged); taken
-- (the take's reply, TAKEN rows; empty when nothing was asked or the
-- deadline had passed); members (the outcomes of the batches' members, in
-- order); stopped (when a child's end failed its run and that took waiting
-- children out of their queues, per such child a STOPPED row: the 1-based
-- position of the taking that ended, its queue and its id).
-- The work of each kind of taking is in ending.lua, in functions that take
-- what they read as arguments: this function reads few names of the
-- library around it (Lua allows 60) and, run by EVAL, adds few locals to
-- those of its includes (Lua allows 200); TestScriptsStayWithinLuaLimits
-- measures both.
local END = LAYOUT.END
local e = {sched_key = KEYS[1], dead_key = KEYS[2], cfg_key = KEYS[3], tprefix = ARGV[END.task_prefix],
  waiting = KEYS[4], retained = KEYS[5], retention = tonumber(ARGV[END.retention]),
  wake_channel = ARGV[END.wake_channel], woken = {}, freed = {order = {}, n = {}},
  pfx = {queue = ARGV[END.queue_prefix], wake = ARGV[END.wake_prefix], sched = ARGV[END.sched_prefix],
    cancel = ARGV[END.cancel_prefix], index = ARGV[END.index_prefix]}}
key_wakes = e.woken -- the keys' next tasks are published with the rest, once
-- The records start after END; their keys after the first 8.
local out, members, stopped, freed_more = end_records(e, KEYS, ARGV, 9, END.N + 1)
key_wakes = nil
-- A fair queue's keys get their slots back, once per key, before the take
-- below (which may use them); a key its limit held goes back in turn.
local woke = FAIR.free(e.tprefix, FAIR.queue_of(e.tprefix, e.waiting), e.freed)
if woke > 0 then
  end_wake(e, e.wake_channel, woke)
end
for channel, n in pairs(e.woken) do
  redis.call('PUBLISH', channel, n)
end
local taken = {}
if tonumber(ARGV[END.max]) > 0 and now_ms() < tonumber(ARGV[END.deadline]) then
  -- During a slot migration the take may find a task hash moved: then it
  -- takes nothing (the ends above stay applied).
  taken = take_tasks({waiting = e.waiting, wq = KEYS[8], holders = KEYS[6], seq = KEYS[7], dead = KEYS[2],
    cfg = KEYS[3], tprefix = e.tprefix, park = KEYS[#KEYS]}, ARGV, END) or {}
end
if ARGV[END.limited] == '1' then
  -- A queue with global limits: slots freed here and not taken again may
  -- let another worker start a task (concurrency limit): tell them.
  local ENDED, freed = LAYOUT.ENDED, 0
  for j = 1, #out, ENDED.N do
    if out[j - 1 + ENDED.outcome] ~= OUT_LOST then freed = freed + 1 end
  end
  freed = freed + freed_more - math.floor(#taken / LAYOUT.TAKEN.N)
  if freed > 0 then
    redis.call('PUBLISH', ARGV[END.wake_channel], freed)
  end
end
local END_REPLY, reply = LAYOUT.END_REPLY, {}
reply[END_REPLY.ends], reply[END_REPLY.taken] = out, taken
reply[END_REPLY.members], reply[END_REPLY.stopped] = members, stopped
return reply

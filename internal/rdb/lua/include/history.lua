--- @include "codes"
--- @include "time"
-- history: the last HISTORY_MAX failed attempts of a task, in its own hash
-- (so its retention, expiry or deletion takes them with it). Attempt seq
-- (0, 1, ...: F_HISTORY_SEQ counts them) is field F_HISTORY .. (seq %
-- HISTORY_MAX): each failure writes one field, in the HSET its end makes
-- anyway, and overwrites the oldest once there are HISTORY_MAX (Go:
-- rdb.HistoryMax). A field holds a JSON object: a, the attempt's number
-- (its failure count); s and e, when it started (F_STARTED, 0 when
-- unknown) and ended (unix ms, Redis time); o, its outcome (retry | dead);
-- w, the worker that ran it; m, its error. Only an end that owns the
-- taking writes it, in the script that ends it: an end retried after its
-- reply was lost is lost, and adds nothing.
local HISTORY_MAX = 10

-- history_pairs returns the field/value pairs (for an HSET of the task's
-- hash) that record a failed attempt: seq and started are the task's
-- F_HISTORY_SEQ and F_STARTED as read (nil when absent), attempt its
-- failure count with this one.
local function history_pairs(seq, attempt, started, outcome, worker, err)
  seq = tonumber(seq) or 0
  local entry = string.format('{"a":%d,"s":%d,"e":%d,"o":"%s","w":%s,"m":%s}', tonumber(attempt) or 0,
    tonumber(started) or 0, now_ms(), outcome, cjson.encode(worker or ''), cjson.encode(err or ''))
  return F_HISTORY_SEQ, seq + 1, F_HISTORY .. (seq % HISTORY_MAX), entry
end

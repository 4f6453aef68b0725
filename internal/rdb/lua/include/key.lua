--- @include "codes"
--- @include "time"
--- @include "packed"
--- @include "bytes"
-- key: ordered queues. Tasks enqueued with a key (F_KEY) run one at a time
-- per key, in enqueue order: only the key's head circulates in the queue's
-- own structures (waiting list, scheduled set, holdings, dead set); the
-- others wait in the key's list <ns>:{T}:k:<queue>:<key>, and the hash
-- <ns>:{T}:kh:<queue> maps each key to its head. A script that ends a head
-- reaches these keys by name, from the tag's prefix and the queue's name
-- (both read from keys it declares), so they share the caller's slot.
--
-- A keyed task's payload field holds an envelope: KEY_ENV, then
-- "<len>:<key>", then one "<score>:<len>:<bytes>" per payload, in score
-- order (several once merged). Package rdb decodes it (ordered.go).
local KEY_ENV = '\255wqk\1'

-- key_names returns the head hash and the key list of key okey of queue
-- qname, the tag's prefix '<ns>:{T}:', from the task prefix, and the
-- queue's count of the tasks behind its keys' heads (see key_behind).
local function key_names(tprefix, qname, okey)
  local base = string.sub(tprefix, 1, #tprefix - 2)
  return base .. 'kh:' .. qname, base .. 'k:' .. qname .. ':' .. okey, base, base .. 'kn:' .. qname
end

-- key_behind adds n to the count of the tasks behind key heads of a queue,
-- <ns>:{T}:kn:<queue> (string): how many entries all its key lists hold.
-- Every push to a key list and every pop from one adds to it in the same
-- script, so it stays exact without a scan of the keys (Store.Stats reads
-- it; a queue may have a million keys). At 0 it is deleted: a queue with
-- none behind has no counter.
local function key_behind(count, n)
  if n ~= 0 and redis.call('INCRBY', count, n) <= 0 then
    redis.call('DEL', count)
  end
end

-- key_queue_of returns the queue name in key k = <tag prefix><kind><name>
-- (kind 'q:', 'dead:', 'done:'), given the task prefix <tag prefix>t:.
local function key_queue_of(tprefix, k, kind)
  return string.sub(k, #tprefix - 2 + #kind + 1)
end

-- An entry of a key's list is a task id, or "<id>@<due ms>" for a task
-- enqueued for later (ids have no '@'), so that moving a task up reads
-- nothing but the list. key_entry splits one.
local function key_entry(e)
  local at = string.find(e, '@', 1, true)
  if not at then
    return e, nil
  end
  return string.sub(e, 1, at - 1), tonumber(string.sub(e, at + 1))
end

-- key_wakes, while a script that publishes its wake-ups once at its end
-- sets it to its table (channel -> count; end does), collects the wake-ups
-- of the tasks moved up; else each is published at once. The function
-- library resets it before every call.
local key_wakes = nil

local function key_wake(channel)
  if key_wakes then
    key_wakes[channel] = (key_wakes[channel] or 0) + 1
  else
    redis.call('PUBLISH', channel, 1)
  end
end

-- key_promote makes list entry e the head of its key: at the back of the
-- waiting list with a wake-up (round robin among keys), or in the
-- scheduled set when it was enqueued for later. Returns its id.
local function key_promote(tprefix, base, qname, heads, okey, e)
  local nxt, due = key_entry(e)
  redis.call('HSET', heads, okey, nxt)
  if due then
    -- The entry carried the due time: the hash's copy is stale from now
    -- on (a cancel would look for '<id>@<due>' in the list).
    redis.pcall('HDEL', tprefix .. nxt, F_KEY_DUE)
  end
  if due and due > now_ms() and redis.pcall('HEXISTS', tprefix .. nxt, F_CANCEL) ~= 1 then
    redis.pcall('HSET', tprefix .. nxt, F_STATE, S_SCHEDULED)
    redis.call('ZADD', base .. 's:' .. qname, due, nxt)
  else
    -- (A task marked cancelled where it waited goes to the queue at once,
    -- due or not, its state kept: the take hands it out to be ended as
    -- cancelled, and the key moves on.)
    -- Its state is already S_QUEUED (set when it joined the list).
    redis.call('RPUSH', base .. 'q:' .. qname, nxt)
    key_wake(base .. 'wake:' .. qname)
  end
  return nxt
end

-- key_pop pops the front of a key's list, counted off its queue's count
-- (key_behind). A list that is not one (corrupt data) is set aside under
-- <list>:bad and read as empty: the end of a task must not fail on it (the
-- task would stay taken, and its worker would try again forever).
local function key_pop(list, count)
  local r = redis.pcall('LPOP', list)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then
      redis.call('RENAME', list, list .. ':bad')
      return false
    end
    error(r.err)
  end
  if r then
    key_behind(count, -1)
  end
  return r
end

-- key_next is called when task id of key okey of queue qname leaves for
-- good (done, cancelled, deleted, or dead on a queue whose keys move on):
-- when it is the key's head, the key's next task becomes the head, or the
-- key is forgotten when none waits. Anything else changes nothing.
local function key_next(tprefix, qname, id, okey)
  local heads, list, base, count = key_names(tprefix, qname, okey)
  local head = redis.pcall('HGET', heads, okey)
  if type(head) == 'table' and head.err and not string.find(head.err, 'WRONGTYPE', 1, true) then
    error(head.err)
  end
  if head ~= id then
    return -- not its key's head (or the heads hash is corrupt: nothing to move)
  end
  local nxt = key_pop(list, count)
  if nxt then
    key_promote(tprefix, base, qname, heads, okey, nxt)
  else
    redis.call('HDEL', heads, okey)
  end
end

-- key_ended is key_next for a caller that knows the task's hash key and a
-- declared key of its queue (k, of the given kind).
local function key_ended(tkey, id, okey, k, kind)
  if okey and okey ~= '' then
    local tprefix = string.sub(tkey, 1, #tkey - #id)
    key_next(tprefix, key_queue_of(tprefix, k, kind), id, okey)
  end
end

-- env_decode reads an envelope: its key and its entries ({s = score text,
-- p = payload}); nil when d is not one.
local function env_decode(d)
  if type(d) ~= 'string' or string.sub(d, 1, #KEY_ENV) ~= KEY_ENV then
    return nil
  end
  local i = #KEY_ENV + 1
  local c = string.find(d, ':', i, true)
  if not c then return nil end
  local kl = tonumber(string.sub(d, i, c - 1))
  if not kl then return nil end
  local key = string.sub(d, c + 1, c + kl)
  i = c + kl + 1
  local out = {}
  while i <= #d do
    local a = string.find(d, ':', i, true)
    local b = a and string.find(d, ':', a + 1, true)
    local n = b and tonumber(string.sub(d, a + 1, b - 1))
    if not n then return nil end
    out[#out + 1] = {s = string.sub(d, i, a - 1), p = string.sub(d, b + 1, b + n)}
    i = b + n + 1
  end
  return key, out
end

-- env_encode writes an envelope.
local function env_encode(key, entries)
  local parts = {KEY_ENV, #key, ':', key}
  for _, e in ipairs(entries) do
    parts[#parts + 1] = e.s .. ':' .. #e.p .. ':'
    parts[#parts + 1] = e.p
  end
  return table.concat(parts)
end

-- env_merge merges entries b into a (Lowkiq's rule): every payload once,
-- an equal payload keeping the lower score, in score order (ties: first
-- seen first).
local function env_merge(a, b)
  local at, out = {}, {}
  for _, list in ipairs({a, b}) do
    for _, e in ipairs(list) do
      local j = at[e.p]
      if not j then
        out[#out + 1] = {s = e.s, p = e.p, n = #out + 1}
        at[e.p] = #out
      elseif tonumber(e.s) < tonumber(out[j].s) then
        out[j].s = e.s
      end
    end
  end
  table.sort(out, function(x, y)
    local sx, sy = tonumber(x.s), tonumber(y.s)
    if sx ~= sy then return sx < sy end
    return x.n < y.n
  end)
  return out
end

-- key_late reports whether deadline dl (a task's F_DEADLINE) has passed
-- by Redis time: such a task never runs (the take ends it as expired).
local function key_late(dl)
  dl = tonumber(dl)
  return dl ~= nil and now_ms() >= dl
end

-- key_tail returns the key's last task when it is still waiting (behind
-- the head, or the head itself when queued or scheduled), else nil; second,
-- 'head' when it is the head. A task marked cancelled where it waits (see
-- cancel.lua) is not waiting: nothing merges into it. Nor does anything
-- merge into a task whose deadline has passed: it will end as expired
-- without running, and a payload merged into it would never run.
local function key_tail(tprefix, heads, list, okey)
  local tail = redis.call('LINDEX', list, -1)
  if tail then
    tail = key_entry(tail)
    local t = redis.pcall('HMGET', tprefix .. tail, F_CANCEL, F_DEADLINE)
    if type(t) ~= 'table' or t.err or t[1] or key_late(t[2]) then
      return nil
    end
    return tail, 'list'
  end
  local head = redis.call('HGET', heads, okey)
  if not head then
    return nil
  end
  local t = redis.pcall('HMGET', tprefix .. head, F_STATE, F_DEADLINE)
  if type(t) == 'table' and not t.err and (t[1] == S_QUEUED or t[1] == S_SCHEDULED) and not key_late(t[2]) then
    return head, 'head'
  end
  return nil
end

-- key_add puts task id (its hash written, state unset) under key okey:
-- the head when the key has none (then at the back of the waiting list,
-- or scheduled at due), else at the back of the key's list, its due time
-- kept for when it becomes the head. A head whose hash is gone (deleted by
-- hand) is replaced. Returns true when it became the head; when it did
-- not, the caller counts it behind (key_behind: once for all the tasks of
-- its call).
local function key_add(tprefix, base, qname, heads, list, okey, id, due)
  local head = redis.call('HGET', heads, okey)
  if head and redis.call('EXISTS', tprefix .. head) == 0 then
    -- Its head's data is gone (deleted by hand): the next one takes over.
    head = key_pop(list, base .. 'kn:' .. qname)
    if head then
      head = key_promote(tprefix, base, qname, heads, okey, head)
    end
  end
  local tkey = tprefix .. id
  if head then
    if due then
      redis.call('HSET', tkey, F_STATE, S_QUEUED, F_KEY_DUE, due)
      redis.call('RPUSH', list, id .. '@' .. due)
    else
      redis.call('HSET', tkey, F_STATE, S_QUEUED)
      redis.call('RPUSH', list, id)
    end
    return false
  end
  redis.call('HSET', heads, okey, id)
  if due then
    redis.call('HSET', tkey, F_STATE, S_SCHEDULED)
    redis.call('ZADD', base .. 's:' .. qname, due, id)
  else
    redis.call('HSET', tkey, F_STATE, S_QUEUED)
    redis.call('RPUSH', base .. 'q:' .. qname, id)
    redis.call('PUBLISH', base .. 'wake:' .. qname, 1)
  end
  return true
end

-- key_listed returns the list of key okey and the entry under which task
-- id (a task waiting behind its key's head) is in it, given its hash key
-- and the queue's waiting list, and the queue's count (key_behind).
local function key_listed(tkey, id, okey, waiting)
  local tprefix = string.sub(tkey, 1, #tkey - #id)
  local _, list, _, count = key_names(tprefix, key_queue_of(tprefix, waiting, 'q:'), okey)
  local due = redis.call('HGET', tkey, F_KEY_DUE)
  if due then
    return list, id .. '@' .. due, count
  end
  return list, id, count
end

-- MERGE_MAX is the most distinct payloads a task gathers by merging: a
-- merge reads, sorts and writes the whole envelope (about 4 us per
-- payload), so it bounds the cost of every merge. A payload that would
-- pass it starts a new task behind the full one instead (merging is a
-- may: the order holds).
local MERGE_MAX = 100

-- MERGE_MAX_BYTES bounds the distinct payloads' bytes a task gathers by
-- merging, as MERGE_MAX bounds their number: the envelope is read and
-- written whole by each merge (and by a dead task's requeue merging into
-- it), so its size is what each merge costs. It is what one take hands
-- out (TAKE_BYTES in take.lua). A task holding no payload
-- yet past it (a single larger payload) takes none more.
local MERGE_MAX_BYTES = COPY_BYTES

-- key_merge_fit returns how many of entries[from..] (in order) can merge
-- into envelope entries have without passing MERGE_MAX distinct payloads
-- or MERGE_MAX_BYTES of them: one whose payload is there already always
-- can.
local function key_merge_fit(have, entries, from)
  local seen, count, bytes = {}, 0, 0
  for _, e in ipairs(have) do
    if not seen[e.p] then
      seen[e.p] = true
      count = count + 1
      bytes = bytes + #e.p
    end
  end
  local n = 0
  for j = from, #entries do
    local p = entries[j].p
    if not seen[p] then
      if count >= MERGE_MAX or bytes + #p > MERGE_MAX_BYTES then
        break
      end
      seen[p] = true
      count = count + 1
      bytes = bytes + #p
    end
    n = n + 1
  end
  return n
end

-- key_merge_run merges as many of entries[from..] as fit (key_merge_fit)
-- into waiting task tail (its envelope's entries, Lowkiq's rule), reading
-- and writing its envelope once, and counts one merge version each.
-- Returns how many merged: 0 when none fit or tail's payload is not an
-- envelope (then nothing changed).
local function key_merge_run(tprefix, tail, okey, entries, from)
  local ttkey = tprefix .. tail
  local _, have = env_decode(redis.pcall('HGET', ttkey, F_PAYLOAD))
  if not have then
    return 0
  end
  local n = key_merge_fit(have, entries, from)
  if n == 0 then
    return 0
  end
  local run = {}
  for j = from, from + n - 1 do
    run[#run + 1] = entries[j]
  end
  redis.call('HSET', ttkey, F_PAYLOAD, env_encode(okey, env_merge(have, run)))
  redis.call('HINCRBY', ttkey, F_MERGE_VERSION, n)
  return n
end

-- key_merge_into merges entries into waiting task tail (its envelope's
-- entries, Lowkiq's rule) and counts a new merge version. Returns false
-- when tail's payload is not an envelope, or when entries do not all fit
-- (MERGE_MAX): then nothing changed.
local function key_merge_into(tprefix, tail, okey, entries)
  local ttkey = tprefix .. tail
  local _, have = env_decode(redis.pcall('HGET', ttkey, F_PAYLOAD))
  if not have or key_merge_fit(have, entries, 1) < #entries then
    return false
  end
  redis.call('HSET', ttkey, F_PAYLOAD, env_encode(okey, env_merge(have, entries)))
  redis.call('HINCRBY', ttkey, F_MERGE_VERSION, 1)
  return true
end

-- key_requeue puts dead task id of key okey back (requeued from the dead
-- set, its counters already reset). Returns true when the caller pushes it
-- at the back of the waiting list: it is the key's head (the key was
-- blocked by it) or becomes it (the key has none). Else it waits behind
-- the key's head, or, on a merging queue whose key has a waiting tail, its
-- payloads merge into that tail, whose counters are reset and which is due
-- at once (Lowkiq: a job from the morgue merged into a queued one).
local function key_requeue(tkey, id, okey, waiting, cfgkey)
  local tprefix = string.sub(tkey, 1, #tkey - #id)
  local qname = key_queue_of(tprefix, waiting, 'q:')
  local heads, list, base, count = key_names(tprefix, qname, okey)
  local head = redis.call('HGET', heads, okey)
  if head == id then
    return true
  end
  if head and redis.call('EXISTS', tprefix .. head) == 0 then
    head = key_pop(list, count)
    if head then
      head = key_promote(tprefix, base, qname, heads, okey, head)
    end
  end
  if not head then
    redis.call('HSET', heads, okey, id)
    return true
  end
  if redis.call('HGET', cfgkey, 'merge') == '1' then
    local tail, where = key_tail(tprefix, heads, list, okey)
    local _, mine = env_decode(redis.pcall('HGET', tkey, F_PAYLOAD))
    if tail and mine and key_merge_into(tprefix, tail, okey, mine) then
      local ttkey = tprefix .. tail
      redis.call('HDEL', ttkey, F_FAILURES, F_CRASHES, F_CRASHED_ON, F_KEY_DUE)
      if where == 'list' then
        redis.call('LSET', list, -1, tail) -- due at once: no '@<due>' any more
      end
      if where == 'head' and redis.call('ZREM', base .. 's:' .. qname, tail) == 1 then
        redis.call('HSET', ttkey, F_STATE, S_QUEUED)
        redis.call('RPUSH', waiting, tail)
        redis.call('PUBLISH', base .. 'wake:' .. qname, 1)
      end
      redis.call('DEL', tkey)
      return false
    end
  end
  redis.call('HSET', tkey, F_STATE, S_QUEUED)
  redis.call('RPUSH', list, id)
  key_behind(count, 1)
  return false
end

-- Batches (QueueConfig.KeyBatch): a take may hand out a key's head together
-- with up to n-1 tasks waiting behind it, in order. Those leave the key's
-- list and are takings like any (a pid each in the worker's holdings); the
-- head's F_BATCH names them and each names the head (F_BATCH_OF). They end
-- together (end, kind batch) or go back together (requeue), so the key's
-- list never moves on while one of them runs.

-- key_batch_read returns the tasks that may join head id of key okey of
-- queue qname in a batch of at most n (the head included): the entries at
-- the front of the key's list, in order, up to the first one enqueued for
-- later than now, whose data is bad or that has a deadline (it stays for
-- when it is the head).
-- Each is {id = id, t = {payload, failures, crashes, max attempts,
-- timeout, cancel, deadline, metadata}}. Reads only. nil when, with safe (a Redis Cluster), a task's
-- hash is on another node (a slot migration). With limit, the batch also
-- stops before the task whose payload would take used (the bytes the take
-- holds already) past limit (see payload_past).
local function key_batch_read(tprefix, qname, id, okey, n, safe, used, limit)
  local heads, list = key_names(tprefix, qname, okey)
  local out = {}
  if n < 2 then
    return out
  end
  local head = redis.pcall('HGET', heads, okey)
  local entries = redis.pcall('LRANGE', list, 0, n - 2)
  for _, r in ipairs({head, entries}) do
    if type(r) == 'table' and r.err then
      if safe and string.find(r.err, 'non local key', 1, true) then
        return nil
      end
      -- Corrupt key data (not a hash, not a list) must not abort a take
      -- that popped ids (they would be in no list): the head goes alone.
      return out
    end
  end
  if head ~= id then
    return out
  end
  local now = now_ms()
  local bytes = used or 0
  for _, e in ipairs(entries) do
    local fid, due = key_entry(e)
    if due and due > now then
      break
    end
    if limit and payload_past(tprefix, fid, bytes, limit) then
      break
    end
    local t = redis.pcall('HMGET', tprefix .. fid, F_PAYLOAD, F_FAILURES, F_CRASHES, F_MAX_ATTEMPTS, F_TIMEOUT, F_CANCEL, F_DEADLINE, F_META)
    if type(t) == 'table' and t.err then
      if safe and string.find(t.err, 'non local key', 1, true) then
        return nil
      end
      break
    end
    if not t[1] or (t[2] and not tonumber(t[2])) or (t[3] and not tonumber(t[3])) or t[6] or t[7] then
      -- Bad data, a cancel asked, or a deadline (checked when it is the
      -- head, which ends it as expired if it has passed).
      break
    end
    local size = #t[1] + #(t[8] or '')
    if limit and bytes + size > limit then
      break
    end
    bytes = bytes + size
    out[#out + 1] = {id = fid, t = t}
  end
  return out
end

-- key_batch_split returns the ids of a head's F_BATCH value, in order.
local function key_batch_split(s)
  local out = {}
  if s then
    for fid in string.gmatch(s, '%S+') do
      out[#out + 1] = fid
    end
  end
  return out
end

-- key_batch_return puts the tasks fids, taken in a batch behind their key's
-- head, back at the front of key okey's list, in their order: queued again,
-- no longer taken.
local function key_batch_return(tprefix, qname, okey, fids)
  local _, list, _, count = key_names(tprefix, qname, okey)
  for j = #fids, 1, -1 do
    local fkey = tprefix .. fids[j]
    redis.call('HSET', fkey, F_STATE, S_QUEUED)
    redis.call('HDEL', fkey, F_WORKER, F_PID, F_BATCH_OF)
    redis.call('LPUSH', list, fids[j])
  end
  key_behind(count, #fids)
end
